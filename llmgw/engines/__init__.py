"""Engines as the control plane knows them: their flags and install recipes."""
