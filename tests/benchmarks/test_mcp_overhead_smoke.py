"""The MCP overhead benchmark runs at a tiny load (its figures are reported, never asserted)."""

from __future__ import annotations

from tests.benchmarks.runner import run_benchmark


def test_the_mcp_benchmark_calls_the_tool_straight_and_through_llmgw_in_both_generations(tmp_path):
    # LiteLLM is left out: installing it takes minutes and needs PyPI.
    report = run_benchmark(
        "mcp_overhead.py",
        tmp_path / "mcp.json",
        "--gateways",
        "direct,llmgw",
        "--rates",
        "10",
        "--each",
        "1s",
        "--warmup",
        "0s",
        timeout_s=180,
    )
    steps = report["steps"]
    assert {(s["gateway"], s["generation"]) for s in steps} == {
        (g, v) for g in ("direct", "llmgw") for v in ("2026-07-28", "2025-11-25")
    }
    for step in steps:
        assert "error" not in step, step
        # It ran: every call was sent on both paths and every one answered.
        assert step["direct"]["sent"] == step["through"]["sent"] == 10, step
        assert step["failed"] == 0, step
        assert step["added_p50_ms"] is not None
    # gatewayd counted each call it relayed, as answered, on its metrics port.
    assert report["gateways"]["llmgw"]["counted_calls"] == {"ok": 20}
