"""A model's load as the scaler reads it: its ready replicas' engines, and what is in flight.

Per replica, the engine's own count (running plus queued, scraped about once
a second: it counts every gateway's requests, so it holds behind several
control planes) or what this gateway has in flight on it, whichever is
higher (live, where a scrape is up to a second old). The time to first token
is the slowest replica's, smoothed by the router. Requests the gateway holds
in its admission queue for the model (no slot free) count as queued.
"""

from __future__ import annotations

from collections.abc import Callable

from gatewayd.controller.scaler import Load
from gatewayd.gateway.metering.scrape import EngineStats
from gatewayd.gateway.routing.router import Router


class ReplicaLoad:
    """``load(replica_ids)``: the Load over those replicas."""

    def __init__(
        self,
        router: Router,
        stats: Callable[[str], EngineStats | None],
        queued: Callable[[str], int] = lambda _model: 0,
    ) -> None:
        self._router = router
        self._stats = stats
        self._queued = queued

    def __call__(self, replica_ids: list[str], model: str = "") -> Load | None:
        """The load over ``replica_ids``; with ``model``, its requests queued here too."""
        if not replica_ids:
            return None
        busy = waiting = 0.0
        ttft: float | None = None
        in_flight = self._router.in_flight
        for rid in replica_ids:
            st = self._stats(rid)
            engine = st.running + st.waiting if st is not None else 0.0
            busy += max(engine, float(in_flight.get(rid, 0)))
            waiting += st.waiting if st is not None else 0.0
            t = self._router.ttft(rid)
            if t is not None:
                ttft = t if ttft is None else max(ttft, t)
        if model:
            held = float(self._queued(model))
            busy, waiting = busy + held, waiting + held
        return Load(busy=busy, waiting=waiting, ttft_s=ttft)
