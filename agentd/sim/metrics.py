"""The simulator's Prometheus metrics, under the names vLLM gives them.

The gateway's router reads an engine's queue and cache from ``/metrics``;
speaking vLLM's names lets the sim stand in for vLLM in routing, load and
fault tests. Each server has its own registry, so two sims in one test
process do not share counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# The buckets vLLM uses for time to first token, in seconds.
TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
E2E_BUCKETS_S = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
# Sequences a sim with no concurrency limit pretends its KV cache holds, so
# the cache usage it reports still rises with load.
UNLIMITED_CAPACITY = 256

CONTENT_TYPE = CONTENT_TYPE_LATEST


class SimMetrics:
    """Counters and gauges of one simulated engine."""

    def __init__(self, model: str, max_concurrency: int = 0) -> None:
        self.registry = CollectorRegistry()
        self._capacity = max_concurrency or UNLIMITED_CAPACITY
        names = ["model_name"]
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=r).labels(model)

        self.running = gauge("vllm:num_requests_running", "Requests being generated now.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting for a slot.")
        self.kv_cache = gauge("vllm:kv_cache_usage_perc", "KV cache in use, 0 to 1.")
        # The name vLLM used before 0.10, still read by older dashboards.
        self.gpu_cache = gauge("vllm:gpu_cache_usage_perc", "KV cache in use, 0 to 1.")
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prompt tokens processed.", names, registry=r
        ).labels(model)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Tokens generated.", names, registry=r
        ).labels(model)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time from arrival to the first token.",
            names,
            buckets=TTFT_BUCKETS_S,
            registry=r,
        ).labels(model)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Time from arrival to the last token.",
            names,
            buckets=E2E_BUCKETS_S,
            registry=r,
        ).labels(model)
        self._success = Counter(
            "vllm:request_success", "Requests finished.", [*names, "finished_reason"], registry=r
        )
        self._model = model
        self._running = 0

    def started(self) -> None:
        self._running += 1
        self.running.set(self._running)
        self._set_cache()

    def finished(self) -> None:
        self._running -= 1
        self.running.set(self._running)
        self._set_cache()

    def count_finish(self, finish_reason: str) -> None:
        """One more request ended: stop, length, or abort (the client left)."""
        self._success.labels(self._model, finish_reason).inc()

    def _set_cache(self) -> None:
        usage = min(1.0, self._running / self._capacity)
        self.kv_cache.set(usage)
        self.gpu_cache.set(usage)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
