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
        self.ttft = Histogram(
            "llmgw_time_to_first_token_seconds",
            "Time from sending a request to an engine to the first byte of its answer",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "llmgw_tokens",
            "Tokens in answered requests",
            ["model", "kind"],
            registry=self.registry,
        )
        self.errors = Counter(
            "llmgw_errors",
            "Client API requests answered with an error status",
            ["model", "status"],
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "llmgw_admission_queue_depth",
            "Requests waiting for room, per admission band",
            ["band"],
            registry=self.registry,
        )
        self.band_in_flight = Gauge(
            "llmgw_admission_in_flight",
            "Requests holding a slot, per admission band",
            ["band"],
            registry=self.registry,
        )
        self.replica_up = Gauge(
            "llmgw_replica_up",
            "1 while a replica (or an outside provider's key) takes requests, 0 while it is out",
            ["model", "replica"],
            registry=self.registry,
        )
        self.key_refusals = Counter(
            "llmgw_external_key_refused",
            "Outside providers' keys that answered 401 and were passed over",
            ["model", "endpoint"],
            registry=self.registry,
        )

    def label(self, model: str) -> str:
        return model if model and self._known(model) else "unknown"

    def observe(self, model: str, status: int, total_s: float, overhead_s: float) -> None:
        name = self.label(model)
        self.requests.labels(name, str(status)).inc()
        if status >= 400:
            self.errors.labels(name, str(status)).inc()
        self.latency.labels(name).observe(total_s)
        self.overhead.observe(overhead_s)

    def observe_answer(self, model: str, outcome) -> None:
        """Tokens and time to first token of an answered request (a forward ``Outcome``)."""
        name = self.label(model)
        if outcome.ttft_s is not None:
            self.ttft.labels(name).observe(outcome.ttft_s)
        if outcome.prompt_tokens:
            self.tokens.labels(name, "prompt").inc(outcome.prompt_tokens)
        if outcome.cached_tokens:
            self.tokens.labels(name, "cached").inc(outcome.cached_tokens)
        if outcome.completion_tokens:
            self.tokens.labels(name, "completion").inc(outcome.completion_tokens)

    def app(self, before: Callable[[], None] | None = None):
        """The /metrics ASGI app; ``before`` brings point-in-time gauges up to date first."""
        inner = make_asgi_app(registry=self.registry)
        if before is None:
            return inner

        async def app(scope, receive, send):
            if scope["type"] == "http":
                before()
            await inner(scope, receive, send)

        return app
