"""What each engine says of its own load: its ``/metrics``, read about once a second.

The router weighs replicas by their queue (requests waiting for a slot),
what they run now and how full their KV cache is. Engines say so in
Prometheus text, each under its own names; ``parse_metrics`` reads the few
that matter and ``Scraper`` asks every ready replica for them.

A replica whose scrape fails keeps its last figures for ``KEEP_S`` (one
slow answer under load is no reason to forget it was busy), then has none,
and the router treats it as an unmeasured one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aiohttp

from gatewayd.gateway.routing.router import Target

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
# Shorter than the interval, so one round never runs into the next.
TIMEOUT_S = 0.8
KEEP_S = 5.0

# Metric name -> what it counts. vLLM (and the sim), llama.cpp's server, SGLang.
_WAITING, _RUNNING, _KV = "waiting", "running", "kv"
NAMES = {
    "vllm:num_requests_waiting": _WAITING,
    "vllm:num_requests_running": _RUNNING,
    "vllm:kv_cache_usage_perc": _KV,
    # vLLM before 0.10 called it so; the newer name wins when both are there.
    "vllm:gpu_cache_usage_perc": "kv_old",
    "llamacpp:requests_deferred": _WAITING,
    "llamacpp:requests_processing": _RUNNING,
    "llamacpp:kv_cache_usage_ratio": _KV,
    "sglang:num_queue_reqs": _WAITING,
    "sglang:num_running_reqs": _RUNNING,
    "sglang:token_usage": _KV,
}


@dataclass(frozen=True, slots=True)
class EngineStats:
    """One engine's load as its metrics said it at ``at`` (monotonic seconds)."""

    waiting: float = 0.0
    running: float = 0.0
    # Share of the KV cache in use, 0 to 1; None when the engine does not say.
    kv_usage: float | None = None
    at: float = 0.0


def parse_metrics(text: str, at: float = 0.0) -> EngineStats | None:
    """The load figures in a Prometheus text exposition; None if it has none of them.

    Series of one name with different labels (one per model or per engine
    process) are added up; the KV cache share is their mean.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        if space < 0:
            continue
        if 0 <= brace < space:
            name = line[:brace]
            close = line.rfind("}")
            if close < brace:
                continue
            rest = line[close + 1 :]
        else:
            name, rest = line[:space], line[space:]
        kind = NAMES.get(name)
        if kind is None:
            continue
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isnan(value) or math.isinf(value):
            continue
        sums[kind] = sums.get(kind, 0.0) + value
        counts[kind] = counts.get(kind, 0) + 1
    if not sums:
        return None
    kv_kind = _KV if _KV in sums else "kv_old"
    kv = sums[kv_kind] / counts[kv_kind] if kv_kind in sums else None
    return EngineStats(
        waiting=max(sums.get(_WAITING, 0.0), 0.0),
        running=max(sums.get(_RUNNING, 0.0), 0.0),
        kv_usage=None if kv is None else min(max(kv, 0.0), 1.0),
        at=at,
    )


class Scraper:
    """Asks every ready replica for its metrics each ``interval_s``; the router reads ``stats``.

    ``targets`` gives the replicas to ask (outside providers are not asked).
    Each replica is asked with its own key (its target's authorization; a
    target without one gets ``engine_key``), as engines with a key demand it
    (llama.cpp's server asks it of ``/metrics`` too); ``tls`` is the client
    side of the nodes' engine doors, for replicas on other machines.
    """

    def __init__(
        self,
        targets: Callable[[], Iterable[Target]],
        *,
        engine_key: str = "",
        tls: ssl.SSLContext | None = None,
        interval_s: float = INTERVAL_S,
        timeout_s: float = TIMEOUT_S,
        keep_s: float = KEEP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._targets = targets
        self._headers = {"authorization": f"Bearer {engine_key}"} if engine_key else {}
        self._tls = tls
        self._interval_s = interval_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._keep_s = keep_s
        self._clock = clock
        self._stats: dict[str, EngineStats] = {}
        # The router's read: a plain dict lookup on the hot path.
        self.stats: Callable[[str], EngineStats | None] = self._stats.get
        self._failing: set[str] = set()

    async def run(self) -> None:
        """Scrape until cancelled."""
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        ) as http:
            while True:
                started = self._clock()
                try:
                    await self.scrape_once(http)
                except Exception:
                    log.exception("scraping engine metrics failed; trying again")
                await asyncio.sleep(max(self._interval_s - (self._clock() - started), 0.05))

    async def scrape_once(self, http: aiohttp.ClientSession) -> None:
        """Ask every ready replica once, together; forget figures older than ``keep_s``."""
        targets = {t.replica_id: t for t in self._targets() if not t.external}
        if targets:
            await asyncio.gather(*(self._scrape(http, t) for t in targets.values()))
        now = self._clock()
        for rid, st in list(self._stats.items()):
            if rid not in targets or now - st.at > self._keep_s:
                del self._stats[rid]
        self._failing &= set(targets)

    async def _scrape(self, http: aiohttp.ClientSession, target: Target) -> None:
        rid = target.replica_id
        try:
            headers = self._headers
            if target.authorization:
                headers = {"authorization": target.authorization}
            if target.base_url.startswith("https://") and self._tls is None:
                raise OSError("no certificate for the nodes' engine doors")
            async with http.get(
                target.base_url + "/metrics",
                headers=headers,
                timeout=self._timeout,
                ssl=self._tls if target.base_url.startswith("https://") else True,
            ) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(
                        resp.request_info, (), status=resp.status, message=resp.reason or ""
                    )
                text = await resp.text(errors="replace")
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            if rid not in self._failing:
                # Once per spell: a replica down for minutes logs one line, not one a second.
                log.info("metrics of %s not read (%s); its last figures are kept a while", rid, e)
                self._failing.add(rid)
            return
        self._failing.discard(rid)
        stats = parse_metrics(text, at=self._clock())
        if stats is not None:
            self._stats[rid] = stats
