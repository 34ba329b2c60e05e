"""A machine's clocks under the test's hand, and a real SQLite store that can be cut or hung."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from gatewayd.store import SqliteStore
from llmgw.errors import StoreError


class Clock:
    """One machine's clocks, moved only by the test: monotonic for the leases, UTC for the store.

    Both move together, as CLOCK_MONOTONIC and the wall clock do on one machine
    (a process frozen by SIGSTOP does not stop either).
    """

    def __init__(self) -> None:
        self.mono_s = 1000.0
        self._utc_at_start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    def __call__(self) -> float:
        return self.mono_s

    def utc(self) -> datetime:
        return self._utc_at_start + timedelta(seconds=self.mono_s - 1000.0)

    def advance(self, seconds: float) -> None:
        self.mono_s += seconds


class RealClock:
    """The process's own clocks, for tests that run the lease's loop in real time."""

    def __call__(self) -> float:
        return time.monotonic()

    def utc(self) -> datetime:
        return datetime.now(UTC)


class FlakyStore(SqliteStore):
    """A real SQLite store on the test's clock whose lease calls can be made to fail or hang.

    ``down``: every lease call fails as an unreachable store does. ``hang``: an
    Event; lease calls wait for it (a store that accepts the call and never
    answers); ``given_up`` counts the hung calls their caller cancelled.
    ``answer_late_s``: a claim's answer reaches its caller that much later on
    the test's clock (the caller was frozen while it travelled).
    """

    def __init__(self, path, clock: Clock | RealClock) -> None:
        super().__init__(path)
        self.clock = clock
        self.down = False
        self.hang: asyncio.Event | None = None
        self.given_up = 0
        self.answer_late_s = 0.0

    def _utc_now(self) -> datetime:
        return self.clock.utc()

    async def _fault(self) -> None:
        if self.down:
            raise StoreError(
                "could not reach the store: connection refused",
                hint="check that the store is up",
            )
        if self.hang is not None:
            try:
                await self.hang.wait()
            except asyncio.CancelledError:
                self.given_up += 1
                raise

    async def claim_lease(self, name, holder, ttl_s):
        await self._fault()
        state = await super().claim_lease(name, holder, ttl_s)
        if self.answer_late_s:
            self.clock.advance(self.answer_late_s)
        return state

    async def get_lease(self, name):
        await self._fault()
        return await super().get_lease(name)

    async def release_lease(self, name, holder):
        await self._fault()
        return await super().release_lease(name, holder)

    async def put_control_plane(self, rec):
        await self._fault()
        return await super().put_control_plane(rec)

    async def list_control_planes(self):
        await self._fault()
        return await super().list_control_planes()
