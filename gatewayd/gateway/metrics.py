"""The gateway's Prometheus metrics, served on the metrics port (:9091).

Label values come from the catalog only: a model name a client makes up is
counted as "unknown", so no request can grow the number of series.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_asgi_app

# Seconds; the overhead buckets reach down to a tenth of a millisecond.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)


class GatewayMetrics:
    def __init__(self, known: Callable[[str], bool]):
        self._known = known
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "llmgw_requests",
            "Client API requests answered",
            ["model", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "llmgw_request_seconds",
            "Time to the whole answer",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.overhead = Histogram(
            "llmgw_overhead_seconds",
            "Time spent in the gateway itself",
            buckets=OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "llmgw_requests_in_flight", "Requests being answered", registry=self.registry
        )
        self.replicas_ready = Gauge(
            "llmgw_replicas_ready", "Ready replicas per model", ["model"], registry=self.registry
        )

    def label(self, model: str) -> str:
        return model if model and self._known(model) else "unknown"

    def observe(self, model: str, status: int, total_s: float, overhead_s: float) -> None:
        name = self.label(model)
        self.requests.labels(name, str(status)).inc()
        self.latency.labels(name).observe(total_s)
        self.overhead.observe(overhead_s)

    def app(self):
        return make_asgi_app(registry=self.registry)
