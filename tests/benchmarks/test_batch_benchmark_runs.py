"""The batch benchmark runs at a tiny size (its figures are reported, never asserted)."""

from __future__ import annotations

from tests.benchmarks.runner import run_benchmark


def test_the_batch_benchmark_runs_a_batch_beside_interactive_load_and_reports(tmp_path):
    report = run_benchmark(
        "batch.py",
        tmp_path / "batch.json",
        "--requests",
        "200",
        "--rate",
        "10",
        "--window-s",
        "2",
        "--quiet",
        timeout_s=240,
    )
    # It ran: the batch answered every request and the windows sent what they were asked.
    assert report["batch"]["status"] == "completed" and report["batch"]["completed"] == 200
    assert {report[f"interactive_{w}"]["sent"] for w in ("before", "beside", "after")} == {20}
    assert report["capacity"]["capacity_rps"] > 0
    # gatewayd's memory was followed through the batch (the figure the issue asked for:
    # the leader's RSS before, during and after); present, never judged by its size.
    m = report["memory"]
    assert m["input_bytes"] > 0 and m["samples_during"] > 0
    for k in ("before", "after_upload", "at_50_pct", "during_peak", "during_median", "after"):
        assert m[f"gatewayd_rss_{k}_mb"] > 0, k
