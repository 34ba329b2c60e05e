"""The gateway's Prometheus metrics, served on the metrics port (:9091).

Label values come from the catalog only: a model name a client makes up is
counted as "unknown", so no request can grow the number of series.

Every request is counted, so the labelled series a request touches are kept
once found (``.labels()`` hashes and locks each time): keyed by the label
value, after the catalog check, never by what a client sent.
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
        # (label, status) -> (requests, errors or None, latency);
        # label -> [ttft, prompt tokens, cached tokens, completion tokens], each once used.
        self._by_status: dict[tuple[str, int], tuple] = {}
        self._by_model: dict[str, list] = {}
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
        self.connections_refused = Counter(
            "llmgw_connections_refused",
            "Connections reset at once (a client or the whole port over its bound) or "
            "at a deadline (headers, a body read, a TLS handshake), by port and reason",
            ["port", "reason"],
            registry=self.registry,
        )
        self.connections_open = Gauge(
            "llmgw_connections_open",
            "Client connections open, by port",
            ["port"],
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
        series = self._by_status.get((name, status))
        if series is None:
            code = str(status)
            series = self._by_status[(name, status)] = (
                self.requests.labels(name, code),
                self.errors.labels(name, code) if status >= 400 else None,
                self.latency.labels(name),
            )
        requests, errors, latency = series
        requests.inc()
        if errors is not None:
            errors.inc()
        latency.observe(total_s)
        self.overhead.observe(overhead_s)

    def observe_answer(self, model: str, outcome) -> None:
        """Tokens and time to first token of an answered request (a forward ``Outcome``)."""
        name = self.label(model)
        series = self._by_model.get(name)
        if series is None:
            series = self._by_model[name] = [None, None, None, None]
        # Each series is made when first counted, as .labels() would: no zero series appear.
        if outcome.ttft_s is not None:
            (series[0] or self._keep(series, 0, self.ttft, name)).observe(outcome.ttft_s)
        for i, kind, n in (
            (1, "prompt", outcome.prompt_tokens),
            (2, "cached", outcome.cached_tokens),
            (3, "completion", outcome.completion_tokens),
        ):
            if n:
                (series[i] or self._keep(series, i, self.tokens, name, kind)).inc(n)

    @staticmethod
    def _keep(series: list, i: int, metric, *labels: str):
        child = series[i] = metric.labels(*labels)
        return child

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
