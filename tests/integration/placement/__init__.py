"""Placement through a real cluster: recorded machines, labels, MIG instances."""
