"""This machine's systemd, as far as llmgw's units need it: is it running, what does it know.

One ``Systemd`` is passed to whatever calls ``systemctl``, so a test plugs in
a script that plays it (``program``) on a machine that has none.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# sd_booted(3): systemd is PID 1 exactly when this directory exists.
BOOTED_MARKER = Path("/run/systemd/system")
SYSTEMCTL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Ran:
    ok: bool
    output: str


@dataclass(frozen=True)
class Systemd:
    """``booted``: systemd runs this machine; ``program``: the systemctl to call."""

    booted: bool
    program: str = "systemctl"

    @classmethod
    def here(cls) -> Systemd:
        return cls(booted=BOOTED_MARKER.is_dir() and shutil.which("systemctl") is not None)

    def run(self, *args: str) -> Ran:
        try:
            done = subprocess.run(
                [self.program, *args],
                capture_output=True,
                text=True,
                timeout=SYSTEMCTL_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return Ran(ok=False, output=str(e))
        return Ran(ok=done.returncode == 0, output=(done.stdout + done.stderr).strip())

    def show(self, unit: str, prop: str) -> str:
        ran = self.run("show", "-p", prop, "--value", unit)
        return ran.output.strip() if ran.ok else ""

    def knows(self, unit: str, home: Path | None = None) -> bool:
        """Whether systemd has ``unit`` loaded; under an LLMGW_HOME only a unit linked from it.

        The second rule keeps a test (or a user's own cluster) under LLMGW_HOME from
        stopping the machine's real llmgw services of the same name.
        """
        if not self.booted or self.show(unit, "LoadState") != "loaded":
            return False
        if home is None:
            return True
        fragment = self.show(unit, "FragmentPath")
        return bool(fragment) and Path(fragment).resolve().is_relative_to(home.resolve())

    def is_active(self, unit: str) -> bool:
        return self.run("is-active", "--quiet", unit).ok

    def main_pid(self, unit: str) -> int | None:
        text = self.show(unit, "MainPID")
        return int(text) if text.isdigit() and text != "0" else None
