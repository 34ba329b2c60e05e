"""The setup screens: the parts of an installation, its plan as a command, and its run."""

from tui.setup.app import SetupConsole, run_setup

__all__ = ["SetupConsole", "run_setup"]
