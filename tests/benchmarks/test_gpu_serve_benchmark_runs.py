"""benchmarks/gpu_serve.py runs end to end once.

Only that it runs is asserted: the vLLM stand-in gets ready and every step
has a figure. The figures are for the report, never for an assertion.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_gpu_serve_benchmark_gets_the_vllm_stand_in_ready_once(tmp_path):
    # Guards against the benchmark rotting: it is run by hand, so nothing else would notice.
    out = tmp_path / "gpu_serve.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_serve.py"),
            "--runs",
            "1",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = json.loads(out.read_text())["runs"]
    assert run["gpus"] == [0, 1]
    assert set(run) >= {"env_build_s", "weights_fetch_s", "engine_start_s", "serve_to_ready_s"}
