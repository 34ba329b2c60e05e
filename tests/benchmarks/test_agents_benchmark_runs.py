"""benchmarks/agents.py runs end to end at a tiny size.

Only that it runs is asserted: every agent registers and is ready, none fails
or drops. Its figures (CPU, memory, latency) are for the report, never for an
assertion — a busy CI machine must not fail a build (see TESTING.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_agents_benchmark_holds_five_agents_without_a_failure(tmp_path):
    # Guards against the benchmark rotting as the protocol or gatewayd's
    # config changes: it is run by hand, so nothing else would notice.
    out = tmp_path / "agents.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "agents.py"),
            "--counts",
            "5",
            "--warmup-s",
            "2",
            "--measure-s",
            "3",
            "--latency-sample",
            "5",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = json.loads(out.read_text())["results"]
    assert result["agents"] == 5
    assert result["ready"] == 5 and result["ready_at_end"] == 5
    assert result["failed"] == 0 and result["dropped"] == 0, result["errors"]
    assert result["visible_ms"]["n"] > 0  # the latency probe saw heartbeats land
