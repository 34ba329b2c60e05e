"""Runs one benchmark script the way a person would, for the smoke tests beside it.

Benchmarks are run by hand, so nothing else would notice one rotting as the
code under it changes; each smoke test runs its script once at a tiny size and
asserts only that it ran and reported, never on a figure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(script: str, out: Path, *args: str, timeout_s: float = 100) -> Any:
    """Run ``benchmarks/<script>`` with ``args`` and ``--json out``; the report it wrote."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args, "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())
