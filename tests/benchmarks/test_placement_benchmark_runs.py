"""benchmarks/placement.py runs end to end at a tiny size.

Only that it runs and reports is asserted; its timings are for the report,
never for an assertion, so a busy CI machine cannot fail a build.
"""

from __future__ import annotations

from tests.benchmarks.runner import run_benchmark


def test_the_placement_benchmark_runs_on_a_tiny_cluster(tmp_path):
    # Guards against the benchmark rotting as placement's API changes: it is
    # run by hand, so nothing else would notice.
    result = run_benchmark(
        "placement.py",
        tmp_path / "placement.json",
        *("--nodes", "12", "--decisions", "5", "--sequential", "7"),
    )
    assert result["nodes"] == 12 and result["gpus"] == 96
    # Both ways, side by side, and whether they chose alike (a count, not a judgement).
    assert set(result["ways"]) == {"index", "scan"}
    assert all(w["sequential"]["n"] == 7 for w in result["ways"].values())
    assert isinstance(result["choices_differ"], int)
