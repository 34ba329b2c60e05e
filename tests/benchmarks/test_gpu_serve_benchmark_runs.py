"""benchmarks/gpu_serve.py runs end to end once.

Only that it runs is asserted: the vLLM stand-in gets ready and every step
has a figure. The figures are for the report, never for an assertion.
"""

from __future__ import annotations

from tests.benchmarks.runner import run_benchmark


def test_the_gpu_serve_benchmark_gets_the_vllm_stand_in_ready_once(tmp_path):
    # Guards against the benchmark rotting: it is run by hand, so nothing else would notice.
    report = run_benchmark("gpu_serve.py", tmp_path / "gpu_serve.json", "--runs", "1")
    (run,) = report["runs"]
    assert run["gpus"] == [0, 1]
    assert set(run) >= {"env_build_s", "weights_fetch_s", "engine_start_s", "serve_to_ready_s"}
