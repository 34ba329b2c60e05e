"""How many of a model's free slots a batch leaves to clients' requests yet to come.

A batch fills the room its model's replicas have; a client's request that
then arrives finds every slot taken and waits for a batch request to end (an
engine's slot is not given back mid-answer). So the runner leaves a margin on
top of what clients hold now: ``sigmas`` standard deviations of their number
in flight, taken as Poisson (variance = mean), the mean followed as an
exponentially weighted average over ``tau_s``. With no client traffic the
margin is 0 and a batch may use every slot; at 100 req/s of 0.1 s requests
(10 in flight on average) and 3 sigmas it is 10 slots, and a client waits only
on a burst past mean + 3 sigma. ``sigmas = 0`` gives every slot to the batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

# Seconds over which the clients' mean in flight is followed: long enough to
# carry a rate across the gaps between its requests, short enough to give the
# slots back to a batch within seconds of the clients stopping (from 10 in
# flight to GONE in about 6 s).
TAU_S = 2.0
# Below this mean a client's request rarely meets another: no margin kept.
GONE = 0.5


class Headroom:
    def __init__(
        self,
        sigmas: float,
        clients_in_flight: Callable[[str], int],
        *,
        tau_s: float = TAU_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._sigmas = sigmas
        self._clients = clients_in_flight
        self._tau_s = tau_s
        self._clock = clock
        # model -> (mean in flight, when last sampled)
        self._mean: dict[str, tuple[float, float]] = {}

    def margin(self, model: str) -> int:
        """Slots to leave free for ``model``'s clients, sampling their number now."""
        now = self._clock()
        x = self._clients(model)
        mean, at = self._mean.get(model, (float(x), now))
        mean += (x - mean) * (1.0 - math.exp(-max(now - at, 0.0) / self._tau_s))
        self._mean[model] = (mean, now)
        if self._sigmas <= 0 or mean < GONE:
            return 0
        return math.ceil(self._sigmas * math.sqrt(max(mean, 1.0)))
