"""Admission bands: who is let in first when every replica of a model is busy.

A key belongs to a band (gold, bronze, bulk). A band has a ceiling on the
requests in flight — all bands together — above which its requests wait, so a
low band with a low ceiling stops early and leaves the rest of the room to the
bands above it; that is what keeps people's latency near idle while a bulk
import sends hundreds at once. When a slot frees, the highest band's oldest
waiter goes first, and a lower band's waiter never jumps a higher one's.

A waiter is turned away in two ways, both saying when to come back, since a
client like ``llmgw-kb`` retries only what carries ``Retry-After``:

    Busy                  message + retry_after_s + status; the root
    ├── QueueFull         503: the band's queue is full
    └── WaitExpired       504: waited as long as the band may (its queue_ttl_s)

One ``Admission`` guards one pool of capacity (a model's replicas); the
caller sizes each band's ``max_in_flight`` from it. A request may take more
than one slot: one asking for ``n`` answers is ``n`` sequences in the engine's
batch, so it takes ``n`` slots (at most its band's whole ceiling, so that it
can pass at all) — counted as one, a client's n=128 filled a 4-slot replica
while the band let three more in beside it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt

# 10 s for both refusals: long enough for a few answers to finish, short
# enough that a bulk import retrying on it keeps its place near the front.
RETRY_AFTER_S = 10


class Band(BaseModel):
    """A priority band: how high it ranks, how full it lets the pool get, how long it waits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    priority: int
    # The saturation ceiling: this band's requests wait while the requests in
    # flight, of every band together, number this many or more.
    max_in_flight: PositiveInt
    # Bounded so a flood cannot hold unbounded memory; past a thousand a
    # waiter would mostly wait out its queue_ttl_s anyway.
    max_queue: NonNegativeInt = 1000
    # 30 s was the wait of every band before bands had their own; a bulk band
    # may be given minutes.
    queue_ttl_s: PositiveFloat = 30.0


class Busy(Exception):
    """A request turned away because every replica stayed busy."""

    status = 503

    def __init__(self, message: str, *, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class QueueFull(Busy):
    """The band's queue is full (HTTP 503 with ``Retry-After``)."""

    status = 503


class WaitExpired(Busy):
    """The request waited as long as its band may (HTTP 504 with ``Retry-After``)."""

    status = 504


class UnknownBand(LookupError):
    """A key names a band the configuration does not have."""


class _BandState:
    __slots__ = ("band", "in_flight", "waiters")

    def __init__(self, band: Band) -> None:
        self.band = band
        self.in_flight = 0
        self.waiters: deque[asyncio.Future[int]] = deque()


class _Entry:
    """``async with admission.enter(band, slots)``: holds the slots for the body of the block."""

    __slots__ = ("_admission", "_granted", "_slots", "_state")

    def __init__(self, admission: Admission, state: _BandState, slots: int) -> None:
        self._admission = admission
        self._state = state
        self._slots = slots
        self._granted = 0

    async def __aenter__(self) -> None:
        self._granted = await self._admission._acquire(self._state, self._slots)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._admission._release(self._state, self._granted)


class Admission:
    """The slots of one pool of capacity, shared out by band."""

    def __init__(self, bands: Sequence[Band]) -> None:
        if not bands:
            raise ValueError("admission needs at least one band")
        self._states: dict[str, _BandState] = {}
        for band in bands:
            if band.name in self._states:
                raise ValueError(f"two admission bands are named {band.name!r}; rename one")
            self._states[band.name] = _BandState(band)
        # Highest priority first; bands of equal priority in the order given.
        self._order = sorted(self._states.values(), key=lambda s: -s.band.priority)
        # Bands the settings no longer name that still hold requests (``reband``).
        self._retired: dict[str, _BandState] = {}
        self._in_flight = 0
        self._waiting = 0
        # The slots each waiter asks for, where it asks for more than one.
        self._wanted: dict[asyncio.Future, int] = {}

    def enter(self, band_name: str, slots: int = 1) -> _Entry:
        """``slots`` in ``band_name``'s share, for ``async with``; waits while the band is saturated.

        Raises ``QueueFull`` at once when the band's queue is full and
        ``WaitExpired`` after its ``queue_ttl_s``; a cancelled waiter leaves
        the queue.
        """
        state = self._states.get(band_name)
        if state is None:
            raise UnknownBand(
                f"no admission band is named {band_name!r}; the bands are {', '.join(self._states)}"
            )
        return _Entry(self, state, max(1, slots))

    def resize(self, bands: Sequence[Band]) -> None:
        """Take new ceilings (the pool grew or shrank) keeping who is in flight and who waits.

        Bands are matched by name; the set of names must not change.
        """
        for band in bands:
            self._states[band.name].band = band
        self._order = sorted(self._states.values(), key=lambda s: -s.band.priority)
        if self._waiting:
            self._dispatch()

    def reband(self, bands: Sequence[Band]) -> None:
        """Take another set of bands (the settings changed), keeping who is in flight and who waits.

        A band kept by name takes its new rank, ceiling and queue bound at once
        (a waiter keeps the queue_ttl_s it started with); a new band starts
        empty; a band no longer named takes no new request, while the ones it
        holds finish and its waiters are still let in, in their turn.
        """
        if not bands:
            raise ValueError("admission needs at least one band")
        states: dict[str, _BandState] = {}
        for band in bands:
            state = self._states.get(band.name) or self._retired.pop(band.name, None)
            if state is None:
                state = _BandState(band)
            state.band = band
            states[band.name] = state
        retired = {**self._retired, **{n: s for n, s in self._states.items() if n not in states}}
        self._retired = {n: s for n, s in retired.items() if s.waiters or s.in_flight}
        self._states = states
        self._order = sorted(
            [*states.values(), *self._retired.values()], key=lambda s: -s.band.priority
        )
        if self._waiting:
            self._dispatch()

    def depth(self, band_name: str) -> int:
        """How many of the band's requests are waiting."""
        return len(self._states[band_name].waiters)

    def in_flight(self, band_name: str) -> int:
        """How many slots the band's requests hold."""
        return self._states[band_name].in_flight

    @property
    def in_flight_total(self) -> int:
        """Slots held, every band together."""
        return self._in_flight

    def _higher_waits(self, priority: int) -> bool:
        """Whether anyone of this priority or above is waiting (a newcomer must not jump them)."""
        if not self._waiting:
            return False
        for state in self._order:
            if state.band.priority < priority:
                return False
            if state.waiters:
                return True
        return False

    async def _acquire(self, state: _BandState, slots: int) -> int:
        """Wait for ``slots`` (at most the band's ceiling); how many were granted."""
        band = state.band
        need = min(slots, band.max_in_flight)
        if self._in_flight + need <= band.max_in_flight and not self._higher_waits(band.priority):
            self._grant(state, need)
            return need
        if len(state.waiters) >= band.max_queue:
            raise QueueFull(
                f"every replica is busy and band {band.name}'s queue is full "
                f"({band.max_queue} waiting); try again in {RETRY_AFTER_S} s"
            )
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[int] = loop.create_future()
        state.waiters.append(waiter)
        if slots > 1:
            self._wanted[waiter] = slots
        self._waiting += 1
        timer = loop.call_later(band.queue_ttl_s, self._expire, state, waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Granted its slots, then cancelled before it could run: give them
                # back, or they are lost for good.
                self._release(state, waiter.result())
            else:
                self._leave(state, waiter)
            raise
        finally:
            timer.cancel()
            self._wanted.pop(waiter, None)

    def _grant(self, state: _BandState, slots: int = 1) -> None:
        self._in_flight += slots
        state.in_flight += slots

    def _release(self, state: _BandState, slots: int = 1) -> None:
        self._in_flight -= slots
        state.in_flight -= slots
        if self._waiting:
            self._dispatch()

    def _leave(self, state: _BandState, waiter: asyncio.Future[int]) -> None:
        """Take a waiter out of its queue; one that held back lower bands no longer does."""
        try:
            state.waiters.remove(waiter)
        except ValueError:
            return  # already gone: granted or expired
        self._waiting -= 1
        self._dispatch()

    def _expire(self, state: _BandState, waiter: asyncio.Future[int]) -> None:
        if waiter.done():
            return
        band = state.band
        self._leave(state, waiter)
        waiter.set_exception(
            WaitExpired(
                f"every replica stayed busy for the {band.queue_ttl_s:g} s band {band.name} "
                f"may wait; try again in {RETRY_AFTER_S} s"
            )
        )

    def _dispatch(self) -> None:
        """Hand free slots to waiters, highest band first, oldest first within a band.

        Stops at the first waiter that cannot be let in, so no lower band's
        waiter is let in past it even where its own ceiling would allow.
        """
        for state in self._order:
            waiters = state.waiters
            ceiling = state.band.max_in_flight
            while waiters:
                head = waiters[0]
                need = min(self._wanted.get(head, 1), ceiling)
                if not head.done() and self._in_flight + need > ceiling:
                    return
                waiters.popleft()
                self._waiting -= 1
                if head.done():
                    continue
                self._grant(state, need)
                head.set_result(need)
