"""The gateway's metrics: label values from the catalog only."""

from __future__ import annotations

from prometheus_client import generate_latest

from gatewayd.gateway.metering.metrics import GatewayMetrics
from gatewayd.gateway.routing.forward import Outcome


def test_made_up_model_names_are_counted_as_unknown_and_add_no_series():
    metrics = GatewayMetrics(known=lambda name: name == "chat")
    for i in range(50):
        metrics.observe(f"invented-{i}", 404, 0.01, 0.0001)
    metrics.observe("chat", 200, 0.2, 0.0003)
    metrics.observe_answer("chat", Outcome(prompt_tokens=7, completion_tokens=5, ttft_s=0.05))
    page = generate_latest(metrics.registry).decode()
    assert 'llmgw_requests_total{model="unknown",status="404"} 50.0' in page
    assert 'llmgw_errors_total{model="unknown",status="404"} 50.0' in page
    assert 'llmgw_requests_total{model="chat",status="200"} 1.0' in page
    assert 'llmgw_tokens_total{kind="prompt",model="chat"} 7.0' in page
    assert "invented" not in page
