"""The leader lease: which control plane may reconcile and command agents at this instant.

Every control plane claims one lease row in the store; the store grants it to
one holder at a time for ``ttl_s`` by its own clock (gatewayd/store/*/cluster.py).
This process then fences itself by its local monotonic clock: a claim SENT at
t that succeeds lets it act until t + ttl_s - margin_s, strictly before the
store lets anyone else take the lease. CLOCK_MONOTONIC keeps counting while
a process is stopped, so a leader frozen by SIGSTOP past that instant is no
longer the leader the moment it resumes, before any of its tasks acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from gatewayd.store import LeaseState, Store
from llmgw.aio import within
from llmgw.errors import ConfigError, StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")

# The reference's figure: 10 s, so a crashed leader is replaced within about
# 11 s (the lease plus a standby's try) and agents follow within the 8 s keepalive.
DEFAULT_TTL_S = 10.0
DEFAULT_TRY_EVERY_S = 1.0

_NEVER = -math.inf


class _Failed(Exception):
    """A store call that failed or was given up; its words are in store_state."""


class LeaderLease:
    """This control plane's view of the leader lease, and the loop that claims and renews it.

    ``held()`` is the one question code asks before acting as the leader: it
    is True only while this process may act now. ``on_change`` callbacks and
    ``leading_event`` follow it from the loop, for work that starts and stops
    with leadership; they can lag a frozen process by one wake-up, held() cannot.
    """

    def __init__(
        self,
        store: Store,
        holder: str,
        *,
        name: str = "leader",
        ttl_s: float = DEFAULT_TTL_S,
        renew_every_s: float | None = None,
        try_every_s: float = DEFAULT_TRY_EVERY_S,
        margin_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        # ttl/4: three more renewals fit before the local deadline if one fails.
        renew_every_s = ttl_s / 4 if renew_every_s is None else renew_every_s
        # ttl/5: room for the two clocks' rates to differ and the claim's trip.
        margin_s = ttl_s / 5 if margin_s is None else margin_s
        if not ttl_s > 0 or not 0 < margin_s < ttl_s:
            raise ConfigError(
                f"the leader lease of {ttl_s} s with a margin of {margin_s} s cannot be held",
                hint="set cluster.lease_ttl_s to a positive number of seconds (10 is usual)",
            )
        if not 0 < renew_every_s < ttl_s - margin_s or not try_every_s > 0:
            raise ConfigError(
                f"renewing a lease of {ttl_s} s every {renew_every_s} s leaves no time to renew",
                hint="renew well within the lease: every quarter of it is usual",
            )
        self.store = store
        self.holder = holder
        self.name = name
        self.ttl_s = ttl_s
        self.renew_every_s = renew_every_s
        self.try_every_s = try_every_s
        self.margin_s = margin_s
        self._clock = clock
        # After the store comes back, a standby waits this long before it
        # claims: enough for the leader of record to retry and keep the lease.
        self.hold_off_s = max(try_every_s, renew_every_s)

        self.leader_id = ""  # the holder last seen in the store ("" while none)
        self.leader_since: datetime | None = None
        self.epoch = 0
        self.store_state = "ok"  # until a call fails
        self.state: LeaseState | None = None  # the row as last seen
        self.leading_event = asyncio.Event()

        self._deadline = _NEVER  # local clock: may act while clock() < this
        self._leading = False  # as last reported to the callbacks
        self._last_renewed_sent = _NEVER
        self._store_down = False  # the last call failed or was given up
        self._hold_off_until = _NEVER
        self._released = False
        self._loss = ""  # why leadership ended, for the log
        self._callbacks: list[Callable[[bool], None]] = []
        self._call_lock = asyncio.Lock()
        self._wake = asyncio.Event()

    # ---- what the rest of the control plane asks ----

    def held(self) -> bool:
        """True only while this process may act as the leader now (by its monotonic clock)."""
        return self._clock() < self._deadline

    def on_change(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(True)`` on gaining leadership and ``callback(False)`` on losing it."""
        self._callbacks.append(callback)

    async def wait_leading(self, timeout_s: float) -> bool:
        """Wait until this process leads; False when ``timeout_s`` passes first."""
        try:
            await within(self.leading_event.wait(), timeout_s)
        except TimeoutError:
            return False
        return self.held()

    # ---- the loop ----

    async def run(self) -> None:
        """Claim (standby) or renew (leader) until cancelled; cancelling stops acting."""
        try:
            while not self._released:
                try:
                    await self.round()
                except Exception:  # a backend's bug must not end the loop
                    log.exception("leader lease: a round failed; trying again")
                    self._fail("the store call failed unexpectedly (see the log)")
                # Woken early by release(), so the loop ends at once.
                # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancel
                # that comes as the wake is set (release() sets it), and the loop ran on.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.next_round_in_s()):
                        await self._wake.wait()
                self._report()
        finally:
            self._step_down("its lease loop stopped")

    async def round(self) -> None:
        """One claim or renewal (or, just after a store outage, one look), and what it changes."""
        async with self._call_lock:
            if self._released:
                return
            self._report()
            try:
                if self.held():
                    await self._claim()
                elif self._store_down and not self._holder_of_record():
                    # The store answers again after an outage. Look, don't claim:
                    # the leader of record retries meanwhile and keeps the lease.
                    # (The reference's failure: while PostgreSQL's primary was
                    # replaced, the lease lapsed for everyone and a standby took
                    # it first, moving leadership for nothing.)
                    await self._look()
                    self._hold_off_until = self._clock() + self.hold_off_s
                    log.info(
                        "leader lease: the store answers again; leaving the lease to %s for %.1f s",
                        (self.state.holder if self.state else "") or "its last holder",
                        self.hold_off_s,
                    )
                elif self._clock() < self._hold_off_until:
                    await self._look()
                else:
                    await self._claim()
            except _Failed:
                pass
            finally:
                self._report()

    async def release(self) -> bool:
        """Clean stop: stop acting, then end the lease in the store so a standby leads at once.

        False when the store could not be told (a standby then takes the lease
        when it lapses). The lease is not claimed again afterwards.
        """
        self._released = True
        self._wake.set()
        self._step_down("it was released")
        # After any claim in flight: one landing after the release would hold
        # the lease again for a whole ttl with nobody acting.
        async with self._call_lock:
            try:
                return await within(self.store.release_lease(self.name, self.holder), self.ttl_s)
            except (StoreError, TimeoutError) as e:
                log.warning(
                    "leader lease: could not give it up (%s); a standby takes it within %.0f s",
                    getattr(e, "message", "") or "the store did not answer",
                    self.ttl_s,
                )
                return False

    # ---- inside ----

    async def _claim(self) -> None:
        sent = self._clock()
        state = await self._call(self.store.claim_lease(self.name, self.holder, self.ttl_s))
        self._observe(state)
        if state.held_by(self.holder):
            # From the send time: the store's expiry counts from later than that.
            self._deadline = sent + self.ttl_s - self.margin_s
            self._last_renewed_sent = sent
        elif self._deadline != _NEVER:
            # Refused: someone else holds it. Step down at once, whatever time is left.
            self._step_down(f"{state.active_holder or 'another control plane'} holds the lease")

    async def _look(self) -> None:
        state = await self._call(self.store.get_lease(self.name))
        if state is not None:
            self._observe(state)

    async def _call(self, call: Awaitable[T]) -> T:
        """A store call given up when it would outlast the time this process may still act."""
        limit_s = self._deadline - self._clock() if self.held() else self.renew_every_s
        try:
            result = await within(call, max(limit_s, 0.0))
        except StoreError as e:
            self._fail(e.message)
            raise _Failed from e
        except TimeoutError as e:
            self._fail(f"the store did not answer within {limit_s:.1f} s")
            raise _Failed from e
        if self._store_down:
            log.info("leader lease: the store answers again")
        self._store_down, self.store_state = False, "ok"
        return result

    def _fail(self, words: str) -> None:
        if words != self.store_state:
            log.warning("leader lease: %s", words)
        self._store_down, self.store_state = True, words

    def _observe(self, state: LeaseState) -> None:
        self.state = state
        self.epoch = state.epoch
        self.leader_id = state.active_holder
        self.leader_since = state.acquired_at if self.leader_id else None

    def _holder_of_record(self) -> bool:
        """Whether the store's row, when last seen, named this process (lapsed or not)."""
        return self.state is not None and self.state.holder == self.holder

    def _step_down(self, why: str) -> None:
        if self._deadline != _NEVER:
            self._loss = why
        self._deadline = _NEVER
        self._report()

    def _report(self) -> None:
        """Tell the callbacks when held() has changed since they last heard."""
        leading = self.held()
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            self.leading_event.set()
            log.info("leader lease: this control plane leads (epoch %s)", self.epoch)
        else:
            self.leading_event.clear()
            why = self._loss or "its lease ran out before it could renew it"
            log.warning("leader lease: this control plane no longer leads: %s", why)
        self._loss = ""
        for callback in list(self._callbacks):
            try:
                callback(leading)
            except Exception:  # one listener's bug must not stop the others
                log.exception("leader lease: a change listener failed")

    def next_round_in_s(self) -> float:
        """How long until the loop's next round: a renewal, a try, or the deadline to report."""
        now = self._clock()
        if not self.held():
            return self.try_every_s
        if self._store_down:
            wake = now + self.try_every_s  # a renewal failed: retry soon
        else:
            wake = self._last_renewed_sent + self.renew_every_s
        # Wake at the deadline too, to report the loss when renewals keep failing.
        return max(0.0, min(wake, self._deadline) - now)
