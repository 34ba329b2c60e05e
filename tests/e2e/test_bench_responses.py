"""``llmgw ctl bench overhead --path responses``: /v1/responses measured beside chat, in one run.

Figures are reported, never asserted (see test_bench_overhead.py): what is
checked is that every request on every path was answered, streamed or not.
"""

from __future__ import annotations

import json

from tests.e2e.test_bench_overhead import bench


def test_responses_are_measured_beside_chat_in_the_same_run_every_request_answered():
    res = bench("overhead", "--rates", "20", "--each", "1s", "--path", "responses", "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    steps = [(s["mode"], s["path"]) for s in report["steps"]]
    assert steps == [
        ("bare", "chat"),
        ("bare", "responses"),
        ("full", "chat"),
        ("full", "responses"),
    ]
    for step in report["steps"]:
        assert step["failed"] == 0, step
        assert step["through"]["sent"] == step["straight"]["sent"] == 20
        assert step["added_p50_ms"] is not None and step["reported_p50_ms"] is not None
    assert report["settings"]["paths"] == ["chat", "responses"]


def test_a_streamed_responses_run_finds_the_first_token_and_the_relay_measures_chat_only():
    res = bench(
        "overhead", "--rates", "20", "--each", "1s", "--mode", "full,relay", "--stream",
        "--path", "responses", "--json",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    steps = json.loads(res.stdout)["steps"]
    assert [(s["mode"], s["path"]) for s in steps] == [
        ("full", "chat"),
        ("full", "responses"),
        ("relay", "chat"),
    ]
    for step in steps:
        assert step["failed"] == 0, step
        assert step["ttft_added_p50_ms"] is not None


def test_an_unknown_path_is_refused_before_anything_starts():
    res = bench("overhead", "--path", "completions", "--json")
    assert res.exit_code == 2 and "use chat or responses" in res.output
