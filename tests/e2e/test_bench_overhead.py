"""``llmgw ctl bench overhead`` runs end to end: real engine, real gateways, real load.

Its figures are reported, never asserted: a timing bound would fail on a busy
machine while the gateway is fine. What is checked is that every request was
answered, on both paths, in both modes, and the shape scripts read.
"""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from llmgw.cli.ctl.bench import bench_app

STEP_FIGURES = {
    "mode",
    "rate",
    "stream",
    "sent",
    "failed",
    "achieved_rate",
    "added_p50_ms",
    "added_p99_ms",
    "ttft_added_p50_ms",
    "ttft_added_p99_ms",
    "reported_p50_ms",
    "reported_p99_ms",
    "gateway_cpu_s_per_1k",
    "engine_cpu_s_per_1k",
    "load_cpu_s_per_1k",
    "others_cpu_pct",
    "straight",
    "through",
}


def bench(*args: str):
    # The command as `llmgw ctl bench` serves it: a group named bench.
    root = typer.Typer()
    root.add_typer(bench_app, name="bench")
    return CliRunner().invoke(root, ["bench", *args])


def test_the_overhead_benchmark_answers_every_request_and_reports_each_mode():
    res = bench("overhead", "--rates", "50", "--each", "2s", "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert [(s["mode"], s["rate"]) for s in report["steps"]] == [("bare", 50), ("full", 50)]
    for step in report["steps"]:
        assert STEP_FIGURES <= step.keys()
        assert step["failed"] == 0, step
        assert step["sent"] == 100 and step["through"]["sent"] == step["straight"]["sent"] == 100
        assert step["added_p50_ms"] is not None and step["added_p99_ms"] is not None
        # The gateway's own header came back on every answer it gave.
        assert step["reported_p50_ms"] is not None
        assert step["gateway_cpu_s_per_1k"] is not None
        assert step["ttft_added_p50_ms"] is None  # not streamed
    assert report["settings"]["rates"] == [50] and report["settings"]["each_s"] == 2


def test_a_streamed_run_reports_the_time_to_first_token_added_through_the_relay_too():
    res = bench(
        "overhead", "--rates", "20", "--each", "1s", "--mode", "full,relay", "--stream", "--json"
    )
    assert res.exit_code == 0, res.output
    steps = json.loads(res.stdout)["steps"]
    assert [s["mode"] for s in steps] == ["full", "relay"]
    for step in steps:
        assert step["stream"] is True and step["failed"] == 0, step
        assert step["ttft_added_p50_ms"] is not None and step["through"]["ttft_p99_ms"] is not None


def test_a_rate_that_is_not_a_number_is_refused_before_anything_starts():
    res = bench("overhead", "--rates", "fast", "--json")
    assert res.exit_code == 2
    assert "is not a list of rates" in res.output
