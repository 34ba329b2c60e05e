"""benchmarks/agents.py runs end to end at a tiny size.

Only that it runs is asserted: every agent registers and is ready, none fails
or drops. Its figures (CPU, memory, latency) are for the report, never for an
assertion — a busy CI machine must not fail a build (see TESTING.md).
"""

from __future__ import annotations

from tests.benchmarks.runner import run_benchmark


def test_the_agents_benchmark_holds_five_agents_without_a_failure(tmp_path):
    # Guards against the benchmark rotting as the protocol or gatewayd's
    # config changes: it is run by hand, so nothing else would notice.
    report = run_benchmark(
        "agents.py",
        tmp_path / "agents.json",
        *("--counts", "5", "--warmup-s", "2", "--measure-s", "3", "--latency-sample", "5"),
    )
    [result] = report["results"]
    assert result["agents"] == 5
    assert result["ready"] == 5 and result["ready_at_end"] == 5
    assert result["failed"] == 0 and result["dropped"] == 0, result["errors"]
    assert result["visible_ms"]["n"] > 0  # the latency probe saw heartbeats land
