"""The reconciler's side of models that start on demand (``min: 0``, a max above it).

Such a model gets one replica as soon as it is asked for (the gateway holds
the request meanwhile, gatewayd/gateway/routing/demand.py), keeps it while it
is used, and gives it back when nobody has asked for it for
``on_demand.evict_after_idle_s`` — never while it still answers something,
and never before the replica is ``on_demand.min_lifetime_s`` old. Between one
replica and its max, the scaler decides as for any model.

An on-demand replica found at start (a restart, or another control plane
taking over) is given a whole idle period from then: nobody is known to have
asked for it, and nobody is known not to have.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from gatewayd.controller.replica import Replica, utcnow
from gatewayd.controller.scaler import Load, Scaler
from llmgw.catalog import Model
from llmgw.scaling import OnDemandConfig


class DemandView(Protocol):
    """What the gateway knows of requests (gatewayd/gateway/routing/demand.py: Demand)."""

    def waiting(self, model: str) -> int: ...

    def last_asked(self, model: str) -> float | None: ...


def starts_on_demand(model: Model) -> bool:
    return model.replicas_min == 0 and model.replicas_max > 0


class OnDemand:
    """Whether an on-demand model should hold a replica now, as the scaler's target."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._born = clock()
        self.demand: DemandView | None = None
        # model -> when its replica was last stopped on demand: only a request after
        # that starts it again (one asked for a while ago must not take the cards back).
        self._stopped_at: dict[str, float] = {}

    def stopped(self, model: str) -> None:
        """``model``'s replica was stopped on demand now (idle, or given to another)."""
        self._stopped_at[model] = self._clock()

    def idle_for(self, asked: float | None) -> float:
        """Seconds since a model was last asked for (since this control plane began, if never)."""
        return self._clock() - (asked if asked is not None else self._born)

    def low(
        self,
        model: Model,
        counted: list[Replica],
        load: Load | None,
        scaler: Scaler,
        cfg: OnDemandConfig,
    ) -> int:
        """The model's low bound now (0 or 1), after starting or stopping it on the scaler."""
        if self.demand is None:
            return model.replicas_min
        name = model.name
        now = self._clock()
        asked = self.demand.last_asked(name)
        # Held on any control plane: a request waiting on a standby keeps it wanted too.
        held = self.demand.waiting(name)
        target = scaler.target(name) or 0
        fresh = asked is not None and asked > self._stopped_at.get(name, float("-inf"))
        if held or (fresh and now - asked < cfg.evict_after_idle_s):
            if target == 0:
                why = (
                    f"started on demand: {held} request{'s' if held != 1 else ''} waiting"
                    if held
                    else "started on demand: asked for"
                )
                scaler.set(name, 1, why)
            return 1
        if target == 0:
            return 0
        idle_s = now - (asked if asked is not None else self._born)
        if idle_s < cfg.evict_after_idle_s or (load is not None and load.busy > 0):
            return 1
        now_utc = utcnow()
        youngest = min(((now_utc - r.made_at).total_seconds() for r in counted), default=None)
        if youngest is not None and youngest < cfg.min_lifetime_s:
            return 1  # protected: started too lately to be given back yet
        self.stopped(name)
        scaler.set(
            name,
            0,
            f"stopped on demand: no request for {idle_s:.0f} s "
            f"(evict_after_idle_s {cfg.evict_after_idle_s:g}); its cards are free",
        )
        return 0
