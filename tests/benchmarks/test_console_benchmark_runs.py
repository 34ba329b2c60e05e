"""The console benchmark runs (its figures are reported, never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "console.py"


def test_the_console_benchmark_runs_and_every_key_is_answered_on_a_quiet_cluster():
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "20", "--models", "10", "--starts", "1"]
        + ["--presses", "6", "--settle-s", "0", "--node-events-per-s", "0"]
        + ["--model-events-per-s", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "first frame" in res.stdout and "missed (>10 s): 0" in res.stdout
