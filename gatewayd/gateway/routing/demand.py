"""Models that start on demand: a request held while its model's replica is started.

A model scaled to ``min: 0`` (and a max above it) has no replica until it is
asked for. ``Demand`` is the gateway's side of that:

- ``asked(model)`` counts each request of such a model, and notes when it
  came; the leader's reconciler reads ``last_asked`` to keep a replica while
  the model is used and to stop it after ``on_demand.evict_after_idle_s``.
  Other control planes' requests reach the leader through the store, as their
  budgets do (``pending`` / ``absorb``, rows of kind ``demand``: a run's count
  of requests per model, only ever growing).
- ``hold(model, ttl_s)`` waits, before a request is forwarded, until the model
  has a ready replica: woken by the replicas' change notices, never polling.
  A replica that cannot be placed ends the wait at once with 503, its reason
  and a Retry-After; so does the band's ``queue_ttl`` passing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.nodes.watch import Broadcaster
from gatewayd.store.counter_records import SharedCounter

DEMAND = "demand"
# A run's rows stay this long after its last write (a stopped control plane's go).
ROW_TTL = timedelta(days=1)
# The period of a run's demand rows: one count for the whole run.
RUN = "run"
# The period of a run's rows of requests held now, said again every sync round while
# any is held; the leader counts them while they are this fresh (a writer that
# died stops saying them).
HELD = "held"
HELD_FRESH_S = 5.0
HELD_ROW_TTL = timedelta(minutes=5)
# Retry-After for a model that cannot be placed now: the reconciler tries again this often.
RETRY_UNPLACEABLE_S = 15


class Demand:
    """On-demand models' requests: counted, shared, and held until a replica is ready.

    ``on_demand(model)``: whether the model starts on demand; ``ready(model)``:
    whether it has a ready replica; ``refused(model)``: why its replica could
    not be placed (None while there is hope); ``wake(model)``: ask the
    reconciler to look now (on the leader; elsewhere nothing).
    """

    def __init__(
        self,
        *,
        on_demand: Callable[[str], bool],
        ready: Callable[[str], bool],
        refused: Callable[[str], str | None],
        wake: Callable[[str], None] = lambda _m: None,
        watch: Broadcaster | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_demand = on_demand
        self._ready = ready
        self._refused = refused
        self._wake = wake
        self._watch = watch
        self._clock = clock
        # This run's requests per model, and what was written of them.
        self._counts: dict[str, int] = {}
        self._written: dict[str, int] = {}
        # model -> when it was last asked for (monotonic), here or elsewhere.
        self._last: dict[str, float] = {}
        # (writer, model) -> the count last read from another run.
        self._seen: dict[tuple[str, str], int] = {}
        # Requests being held now, per model.
        self.holding: dict[str, int] = {}
        # model -> held requests last written (a model no longer held is written once as 0).
        self._held_written: dict[str, int] = {}
        # (writer, model) -> requests another run holds, and when we last read it (monotonic).
        self._held_elsewhere: dict[tuple[str, str], tuple[int, float]] = {}
        self._changed = asyncio.Event()
        self._follow: asyncio.Task | None = None

    # ---- counting -----------------------------------------------------------------

    def asked(self, model: str) -> bool:
        """Count a request of ``model``; whether the model starts on demand."""
        if not self._on_demand(model):
            return False
        self._counts[model] = self._counts.get(model, 0) + 1
        self._last[model] = self._clock()
        return True

    def last_asked(self, model: str) -> float | None:
        """When ``model`` was last asked for (monotonic seconds), here or on another plane."""
        return self._last.get(model)

    def pending(self, writer: str) -> list[SharedCounter]:
        """This run's counts that changed since the last call, and the requests it holds now
        (said again every round while any is held, so that the leader knows they still
        wait), as rows for the store."""
        rows = []
        now = datetime.now(UTC)
        expires = now + ROW_TTL
        for model, n in self._counts.items():
            if self._written.get(model) != n:
                self._written[model] = n
                rows.append(SharedCounter(writer, model, DEMAND, RUN, n, expires))
        held_until = now + HELD_ROW_TTL
        for model in self.holding.keys() | self._held_written.keys():
            n = self.holding.get(model, 0)
            if n or self._held_written.get(model):
                rows.append(SharedCounter(writer, model, DEMAND, HELD, n, held_until))
            if n:
                self._held_written[model] = n
            else:
                self._held_written.pop(model, None)
        return rows

    def unsent(self, rows: Iterable[SharedCounter]) -> None:
        for c in rows:
            if c.kind == DEMAND and c.period == RUN:
                self._written.pop(c.scope, None)
            elif c.kind == DEMAND and c.period == HELD and not c.amount:
                self._held_written[c.scope] = 1  # the zero is said again next round

    def absorb(self, rows: Iterable[SharedCounter], *, first: bool = False) -> None:
        """Other runs' counts: one that grew means its model was asked for just now, and
        the reconciler is asked to look at once. Their held requests are kept (with when
        they were last said) for ``waiting``."""
        now = self._clock()
        wall = datetime.now(UTC)
        for c in rows:
            if c.kind != DEMAND:
                continue
            key = (c.writer, c.scope)
            if c.period == HELD:
                said = c.updated_at
                if said is not None and (wall - said).total_seconds() > HELD_FRESH_S:
                    self._held_elsewhere.pop(key, None)  # an old row: its writer has gone
                    continue
                had = self._held_elsewhere.get(key, (0, 0.0))[0]
                self._held_elsewhere[key] = (c.amount, now)
                if c.amount and not had:
                    self._last[c.scope] = now
                    self._wake(c.scope)
                continue
            before = self._seen.get(key)
            self._seen[key] = c.amount
            if not first and (before is None or c.amount > before):
                self._last[c.scope] = now
                self._wake(c.scope)

    def waiting(self, model: str) -> int:
        """Requests of ``model`` held now, here and on the other control planes (as they
        last said, within ``HELD_FRESH_S``)."""
        n = self.holding.get(model, 0)
        if self._held_elsewhere:
            now = self._clock()
            for (writer, scope), (amount, at) in list(self._held_elsewhere.items()):
                if now - at > HELD_FRESH_S:
                    del self._held_elsewhere[(writer, scope)]
                elif scope == model:
                    n += amount
        return n

    # ---- holding ------------------------------------------------------------------

    async def hold(self, model: str, ttl_s: float) -> None:
        """Return once ``model`` has a ready replica; ApiError 503 if none comes in ``ttl_s``."""
        if self._ready(model):
            return
        self._start_following()
        self.holding[model] = self.holding.get(model, 0) + 1
        deadline = self._clock() + ttl_s
        try:
            self._wake(model)
            while True:
                if self._ready(model):
                    return
                why = self._refused(model)
                if why:
                    raise ApiError(
                        503,
                        f"{model!r} is started on demand, and cannot be started now: {why} "
                        f"(every node's reason: llmgw ctl explain-placement {model})",
                        code="no_capacity",
                        retry_after_s=RETRY_UNPLACEABLE_S,
                    )
                left = deadline - self._clock()
                if left <= 0:
                    raise ApiError(
                        503,
                        f"{model!r} is started on demand, and no replica of it was ready "
                        f"within {ttl_s:g} s (its band's queue_ttl); it is still starting",
                        code="no_replica_ready",
                        retry_after_s=max(1, round(ttl_s / 2)),
                    )
                changed = self._changed
                try:
                    async with asyncio.timeout(left):
                        await changed.wait()
                except TimeoutError:
                    pass
        finally:
            n = self.holding[model] - 1
            if n:
                self.holding[model] = n
            else:
                del self.holding[model]

    def notice(self) -> None:
        """Something about replicas changed: every held request looks again."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _start_following(self) -> None:
        if self._watch is None or (self._follow is not None and not self._follow.done()):
            return
        self._follow = asyncio.get_running_loop().create_task(self._follow_watch())

    async def _follow_watch(self) -> None:
        sub = self._watch.subscribe(["replicas", "models"])
        try:
            async for _topic, _key in sub.changes():
                self.notice()
        finally:
            self._watch.unsubscribe(sub)

    async def close(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow
