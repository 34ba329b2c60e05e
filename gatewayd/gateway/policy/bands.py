"""Admission bands per model: each model's slots shared out by band, sized from its replicas.

The bands come from server.yaml (``router.admission``); a band's ceiling is a
share of the model's capacity — the parallel slots of its ready replicas —
so the same configuration fits a one-replica model and a twenty-replica one.
A model with no known capacity (an outside provider) is not held back here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gatewayd.gateway.policy.admission import Admission, Band
from llmgw.config import AdmissionConfig

log = logging.getLogger(__name__)


class _Open:
    """The entry of a model that is not held back."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc) -> None:
        return None


_OPEN = _Open()


class BandPools:
    def __init__(self, cfg: AdmissionConfig, capacity: Callable[[str], int]):
        self._cfg = cfg
        self._capacity = capacity
        self._names = {b.name for b in cfg.bands}
        self._pools: dict[str, tuple[int, Admission]] = {}
        self._warned: set[str] = set()

    def reconfigure(self, cfg: AdmissionConfig) -> None:
        """Take other bands (the kept settings changed), keeping every model's requests.

        Requests in flight stay in flight and waiters keep their place; a
        band's new ceiling, queue bound and rank hold from the next request.
        """
        self._cfg = cfg
        self._names = {b.name for b in cfg.bands}
        self._warned.clear()
        for model, (capacity, admission) in list(self._pools.items()):
            admission.reband(self._bands(capacity))
            self._pools[model] = (capacity, admission)

    @property
    def config(self) -> AdmissionConfig:
        """The bands in force."""
        return self._cfg

    @property
    def band_names(self) -> list[str]:
        return [b.name for b in self._cfg.bands]

    def lowest(self) -> str:
        """The band of least priority: where batch requests wait for room."""
        return min(self._cfg.bands, key=lambda b: b.priority).name

    def band_of(self, name: str) -> str:
        """The band a key's requests wait in: its own if configured, else the default."""
        if not name:
            return self._cfg.default_band
        if name not in self._names:
            if name not in self._warned:
                self._warned.add(name)
                log.warning(
                    "a key names the admission band %r, which server.yaml does not have;"
                    " its requests use the band %r",
                    name,
                    self._cfg.default_band,
                )
            return self._cfg.default_band
        return name

    def _bands(self, capacity: int) -> list[Band]:
        return [
            Band(
                name=b.name,
                priority=b.priority,
                max_in_flight=max(1, round(b.saturation_ceiling * capacity)),
                max_queue=b.max_queue,
                queue_ttl_s=b.queue_ttl,
            )
            for b in self._cfg.bands
        ]

    def enter(self, model: str, band: str, slots: int = 1):
        """``async with`` this around the forwarding of one request of ``model``; it holds
        ``slots`` of the model's slots (a request for ``n`` answers holds ``n``)."""
        capacity = self._capacity(model)
        if capacity <= 0:
            return _OPEN
        held = self._pools.get(model)
        if held is None:
            admission = Admission(self._bands(capacity))
            self._pools[model] = (capacity, admission)
        else:
            size, admission = held
            if size != capacity:
                admission.resize(self._bands(capacity))
                self._pools[model] = (capacity, admission)
        return admission.enter(band, slots)

    def held(self, model: str) -> int:
        """Requests of ``model`` in flight or waiting, every band together."""
        pool = self._pools.get(model)
        if pool is None:
            return 0
        admission = pool[1]
        return admission.in_flight_total + sum(admission.depth(b) for b in self.band_names)

    def queue_ttl(self, band: str) -> float:
        """How long a request of ``band`` may wait (for room, or for a replica to start)."""
        for b in self._cfg.bands:
            if b.name == band:
                return b.queue_ttl
        return 30.0

    def queued(self, model: str) -> int:
        """Requests of ``model`` waiting here for a slot, every band together."""
        pool = self._pools.get(model)
        return 0 if pool is None else sum(pool[1].depth(b) for b in self.band_names)

    def depth(self, band: str) -> int:
        """Requests of ``band`` waiting, every model together."""
        return sum(a.depth(band) for _, a in self._pools.values())

    def in_flight(self, band: str) -> int:
        return sum(a.in_flight(band) for _, a in self._pools.values())
