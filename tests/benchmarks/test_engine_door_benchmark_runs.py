"""benchmarks/engine_door.py runs end to end over its three paths.

Only that it runs and every request is answered is asserted; its timings are
for the report, never for an assertion.
"""

from __future__ import annotations

from tests.benchmarks.runner import run_benchmark


def test_the_engine_door_benchmark_asks_the_engine_directly_and_through_both_doors(tmp_path):
    # Guards against the benchmark rotting as the door changes: it is run by hand.
    result = run_benchmark(
        "engine_door.py", tmp_path / "door.json", "--rate", "50", "--seconds", "1"
    )
    assert len(result["paths"]) == 3
    for figures in result["paths"].values():
        assert figures["failed"] == 0 and figures["requests"] == 50
