"""The reconcile benchmark runs (its figures are reported, never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reconcile.py"


def test_the_reconcile_benchmark_runs_and_places_every_model():
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "20", "--models", "10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "10 placed, 10 ready" in res.stdout
