"""How many replicas a model between its min and max should run now, from its load.

The reconciler asks once a pass (every 2 s, and when something changes).
Each model's load is sampled then (``Load``: what its ready replicas run and
hold queued, and their time to first token) and kept for the longer of the
two windows. A replica is added when the load, on average over
``up_after_s``, stays above ``high_per_slot`` (or the queue or the time to
first token stay high); one is taken away when the load of one replica fewer
would stay under ``low_per_slot`` for ``down_after_s``. After each change
the samples start again and nothing changes for ``cooldown_s``: a change is
judged on the capacity it made, never on the load before it. While a
replica the target counts is not ready yet, nothing is decided either.

The decision is the leader's, in memory: a control plane that takes over
starts from the replicas it finds (clamped to min and max), not from min.
Each change is kept (``changes``) for ``ctl warnings``, and its reason is
written in the history of the replica it starts or stops.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gatewayd.controller.replica import utcnow
from llmgw.scaling import ScalingConfig

# Changes kept for ``ctl warnings`` (the whole cluster's).
CHANGES_KEPT = 200
# Samples closer together than this are one (a burst of shard reports kicks many passes).
SAMPLE_EVERY_S = 0.5


@dataclass(frozen=True, slots=True)
class Load:
    """A model's load at one moment, over its ready replicas."""

    # Requests its engines run and hold queued (or the gateway has in flight, if more).
    busy: float = 0.0
    # Of those, the ones the engines hold queued for a slot.
    waiting: float = 0.0
    # The slowest ready replica's smoothed time to first token; None: not measured lately.
    ttft_s: float | None = None


@dataclass(frozen=True, slots=True)
class ScaleChange:
    """One change the scaler made, and why."""

    at: datetime
    model: str
    before: int
    after: int
    reason: str


@dataclass(slots=True)
class _ModelState:
    target: int
    since: float  # when sampling began (after the last change)
    changed_at: float = float("-inf")
    reason: str = ""
    samples: deque = field(default_factory=deque)  # (at, busy, waiting, ttft or None)
    last_sample: float = float("-inf")


class Scaler:
    """The target replica count of each model between its bounds, kept across passes."""

    def __init__(
        self,
        config: ScalingConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or ScalingConfig()
        self._clock = clock
        self._models: dict[str, _ModelState] = {}
        self.changes: deque[ScaleChange] = deque(maxlen=CHANGES_KEPT)

    def reconfigure(self, config: ScalingConfig) -> None:
        """New thresholds and windows, from now on (the samples taken so far stay)."""
        self.config = config

    def forget(self, keep: Iterable[str]) -> None:
        """Drop what is kept of models no longer in the catalog."""
        keep = set(keep)
        for name in [m for m in self._models if m not in keep]:
            del self._models[name]

    def target(self, model: str) -> int | None:
        """The count the scaler holds for ``model`` now; None before its first pass."""
        st = self._models.get(model)
        return None if st is None else st.target

    def reason(self, model: str) -> str:
        """Why the target is what it is (the last change's reason; "" if none was made)."""
        st = self._models.get(model)
        return "" if st is None else st.reason

    def set(self, model: str, n: int, why: str) -> None:
        """Hold ``n`` for ``model`` from now on (a start or stop on demand), with its reason."""
        now = self._clock()
        st = self._models.get(model)
        if st is None:
            st = self._models[model] = _ModelState(target=n, since=now)
            before = 0
        else:
            before = st.target
        if before == n:
            return
        st.target = n
        self._changed(model, st, now, before, why)

    def decide(
        self,
        model: str,
        *,
        low: int,
        high: int,
        have: int,
        ready: int,
        slots: int,
        load: Load | None,
    ) -> int:
        """The replicas ``model`` should run: ``low`` ≤ it ≤ ``high``.

        ``have``: the replicas it counts now (ready or on their way), ``ready``
        of them ready, ``slots`` per replica; ``load`` over the ready ones
        (None: nothing measured, so nothing changes).
        """
        now = self._clock()
        st = self._models.get(model)
        if st is None:
            st = self._models[model] = _ModelState(target=min(max(have, low), high), since=now)
        if not low <= st.target <= high:
            before = st.target
            st.target = min(max(st.target, low), high)
            self._changed(model, st, now, before, f"scale set to {low}..{high}")
            return st.target
        if low == high or load is None or ready < st.target or ready == 0:
            # Nothing to choose, nothing measured, or capacity still on its way.
            self._restart(st, now)
            return st.target
        if now - st.last_sample < SAMPLE_EVERY_S:
            return st.target
        st.last_sample = now
        cfg = self.config
        st.samples.append((now, load.busy, load.waiting, load.ttft_s))
        keep_from = now - max(cfg.up_after_s, cfg.down_after_s)
        while st.samples and st.samples[0][0] < keep_from:
            st.samples.popleft()
        if now - st.changed_at < cfg.cooldown_s:
            return st.target
        capacity = max(ready * slots, 1)
        if st.target < high and now - st.since >= cfg.up_after_s:
            window = _window(st.samples, now - cfg.up_after_s)
            # High means most of the window, not its mean: a burst of a few seconds is no load.
            busy, waiting = _low_quarter(window, 1), _low_quarter(window, 2)
            ttfts = [s[3] for s in window if s[3] is not None]
            ttft = _low_quarter([(0, t) for t in ttfts], 1) if ttfts else None
            why = ""
            if busy / capacity > cfg.high_per_slot:
                why = (
                    f"over {cfg.high_per_slot:g} requests a slot for {cfg.up_after_s:g} s "
                    f"({_mean(window, 1) / capacity:.2f} on average)"
                )
            elif waiting / ready >= cfg.high_queue_per_replica:
                why = (
                    f"{cfg.high_queue_per_replica:g} or more requests queued a replica for "
                    f"{cfg.up_after_s:g} s ({_mean(window, 2) / ready:.1f} on average)"
                )
            elif cfg.high_ttft_s and ttft is not None and ttft > cfg.high_ttft_s:
                why = (
                    f"time to first token over {cfg.high_ttft_s:g} s for {cfg.up_after_s:g} s "
                    f"({sum(ttfts) / len(ttfts):.2f} s on average)"
                )
            if why:
                before = st.target
                st.target += 1
                self._changed(model, st, now, before, f"scaled up to {st.target}: {why}")
                return st.target
        if st.target > max(low, 1) and now - st.since >= cfg.down_after_s:
            window = _window(st.samples, now - cfg.down_after_s)
            fewer = max((ready - 1) * slots, 1)
            # Low means nearly all of the window: one replica fewer would have carried it.
            busy, waiting = _high_tenth(window, 1), _high_tenth(window, 2)
            if busy / fewer < cfg.low_per_slot and waiting < cfg.high_queue_per_replica:
                before = st.target
                st.target -= 1
                self._changed(
                    model,
                    st,
                    now,
                    before,
                    f"scaled down to {st.target}: under {cfg.low_per_slot:g} requests a slot "
                    f"with one replica fewer for {cfg.down_after_s:g} s "
                    f"({_mean(window, 1) / capacity:.2f} a slot on average)",
                )
        return st.target

    def _changed(self, model: str, st: _ModelState, now: float, before: int, why: str) -> None:
        st.reason = why
        st.changed_at = now
        self._restart(st, now)
        self.changes.append(
            ScaleChange(at=utcnow(), model=model, before=before, after=st.target, reason=why)
        )

    @staticmethod
    def _restart(st: _ModelState, now: float) -> None:
        st.samples.clear()
        st.since = now
        st.last_sample = float("-inf")


def _window(samples: deque, start: float) -> list[tuple]:
    return [s for s in samples if s[0] >= start]


def _mean(window: list[tuple], i: int) -> float:
    return sum(s[i] for s in window) / len(window) if window else 0.0


def _low_quarter(window: list[tuple], i: int) -> float:
    """The value three samples in four are above (the 25th percentile)."""
    if not window:
        return 0.0
    values = sorted(s[i] for s in window)
    return values[(len(values) - 1) // 4]


def _high_tenth(window: list[tuple], i: int) -> float:
    """The value nine samples in ten are under (the 90th percentile)."""
    if not window:
        return 0.0
    values = sorted(s[i] for s in window)
    return values[(len(values) - 1) * 9 // 10]
