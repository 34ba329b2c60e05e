"""Rate limits that hold across control planes: the others' takes charged to our buckets.

``SharedLimitTable`` is the gateway's ``LimitTable``, exact as it is for one
control plane, which also counts what it takes per scope and minute window
(``pending`` hands those totals to ``CounterSync``) and charges its buckets
with what the other control planes took (``absorb``). Every control plane's
bucket for a scope thus models the one cluster-wide bucket: it refills at the
scope's rate once, and every request anyone let through is taken from it, a
sync interval late at most. Over any stretch of time the cluster lets through
at most the limit's allowance plus what the others let through in the last
sync interval, which no one here could know of yet (docs/decisions.md).

A window is only how a total is kept small and then forgotten: a row holds a
run's net take in one minute, and what counts is how much it grew since it
was last read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from gatewayd.gateway.policy.limits import (
    IDLE_S,
    Clock,
    Limits,
    LimitTable,
    Refusal,
    Ticket,
    TokenBucket,
)
from gatewayd.store.counter_records import SharedCounter

WINDOW_S = 60
# A window's rows are kept two more minutes: a control plane a little behind
# (a slow sync, a clock a little late) still reads the last growth of the window.
KEEP_WINDOWS_S = 120
RATE_KINDS = ("rpm", "tpm")
# A window row another wrote is remembered this long after it was last read: well past
# its minute and the sync's look back, whatever the writer's clock says the minute is.
FORGET_SEEN_S = 300.0
_NONE = (0, 0.0)


def window_of(wall_s: float) -> int:
    """The minute window a wall-clock moment falls in (minutes since the epoch)."""
    return int(wall_s // WINDOW_S)


def _period(window: int) -> str:
    return f"m{window}"


def _window(period: str) -> int | None:
    return int(period[1:]) if period[:1] == "m" and period[1:].isdigit() else None


class SharedTicket(Ticket):
    """A ``Ticket`` whose settlement is also counted in the window it falls in."""

    __slots__ = ("_table", "_tpm_scopes")

    def __init__(self, ticket: Ticket, table: SharedLimitTable, tpm_scopes: list) -> None:
        # The same buckets and clock as the ticket LimitTable.admit made.
        super().__init__(ticket._tpm, ticket.estimate, ticket._clock)
        self._table = table
        self._tpm_scopes = tpm_scopes

    def settle(self, actual_tokens: int) -> None:
        """As ``Ticket.settle``: only the first call counts, here and in the shared totals."""
        if self._settled:
            return
        super().settle(actual_tokens)
        diff = max(0, actual_tokens) - self.estimate
        if diff:
            window = window_of(self._table.wall())
            for scope in self._tpm_scopes:
                self._table.took(scope, "tpm", window, diff)


class SharedLimitTable(LimitTable):
    """The rate buckets of every scope seen lately, charged with every control plane's takes."""

    def __init__(
        self,
        clock: Clock = time.monotonic,
        idle_s: float = IDLE_S,
        *,
        wall: Clock = time.time,
    ) -> None:
        super().__init__(clock, idle_s)
        self.wall = wall
        # (scope, kind, window) → net taken here in that window, and as last written.
        # The hot path only adds to the first; the sync finds what changed.
        self._own: dict[tuple[str, str, int], int] = {}
        self._written: dict[tuple[str, str, int], int] = {}
        self._rates: dict[tuple[str, str], int] = {}
        # (writer, scope, kind, period) → the writer's total as last counted here.
        # With when it was last read (our wall clock), so it is forgotten only once no
        # read can bring the row back: a row is written for a window's minute on the
        # writer's clock, and read again for LOOKBACK_S after each write.
        self._seen: dict[tuple[str, str, str, str], tuple[int, float]] = {}
        self._seen_window = window_of(wall())

    def admit(
        self, scopes: Sequence[tuple[str, Limits]], est_tokens: int, requests: int = 1
    ) -> Refusal | Ticket:
        outcome = super().admit(scopes, est_tokens, requests)
        if isinstance(outcome, Refusal):
            return outcome
        window = int(self.wall() // WINDOW_S)
        est = max(0, est_tokens)
        own = self._own
        tpm_scopes = []
        for scope, limits in scopes:
            if limits.rpm is not None:
                key = (scope, "rpm", window)
                own[key] = own.get(key, 0) + requests
            if limits.tpm is not None:
                key = (scope, "tpm", window)
                own[key] = own.get(key, 0) + est
                tpm_scopes.append(scope)
        if not tpm_scopes:
            return outcome
        return SharedTicket(outcome, self, tpm_scopes)

    def took(self, scope: str, kind: str, window: int, n: int) -> None:
        """Count ``n`` taken here (negative: given back) from a scope's ``kind`` in a window."""
        key = (scope, kind, window)
        self._own[key] = self._own.get(key, 0) + n

    def pending(self, writer: str) -> list[SharedCounter]:
        """This process's window totals that changed since the last call, as rows for the store."""
        rows = []
        written = self._written
        for key, amount in self._own.items():
            if written.get(key) == amount:
                continue
            written[key] = amount
            scope, kind, window = key
            # The rate the bucket counts against now (the last one known if it went idle).
            bucket = self._buckets.get((scope, kind))
            if bucket is not None:
                self._rates[(scope, kind)] = int(bucket.capacity)
            expires = datetime.fromtimestamp((window + 1) * WINDOW_S + KEEP_WINDOWS_S, UTC)
            rate = self._rates.get((scope, kind), 0)
            period = _period(window)
            rows.append(SharedCounter(writer, scope, kind, period, amount, expires, rate))
        # Totals of windows over are not needed once written.
        current = window_of(self.wall())
        if any(k[2] < current - 1 for k in self._own):
            self._own = {k: v for k, v in self._own.items() if k[2] >= current - 1}
            self._written = {k: v for k, v in written.items() if k in self._own}
            self._rates = {(k[0], k[1]): r for k in self._own if (r := self._rates.get(k[:2]))}
        return rows

    def unsent(self, rows: Iterable[SharedCounter]) -> None:
        """Rows ``pending`` gave that the store did not take: sent again next time."""
        for c in rows:
            window = _window(c.period)
            if c.kind in RATE_KINDS and window is not None:
                key = (c.scope, c.kind, window)
                if key not in self._own:
                    self._own[key] = c.amount  # its window was dropped meanwhile
                self._written.pop(key, None)

    def absorb(self, rows: Iterable[SharedCounter], *, first: bool = False) -> int:
        """Charge our buckets with the growth of the others' takes; how many rows grew.

        ``first``: the totals found at start. Only the current window's count,
        less what the scope's rate has refilled since the window began, is
        charged: that is about what the cluster's bucket still misses of it.
        """
        now_wall = self.wall()
        current = window_of(now_wall)
        seen = self._seen
        grew = 0
        for c in rows:
            if c.kind not in RATE_KINDS:
                continue
            window = _window(c.period)
            if window is None:
                continue
            key = (c.writer, c.scope, c.kind, c.period)
            before = seen.get(key, _NONE)[0]
            seen[key] = (c.amount, now_wall)
            delta = c.amount - before
            if first:
                if window != current or c.rate_per_min <= 0:
                    continue
                refilled = (now_wall - window * WINDOW_S) * c.rate_per_min / WINDOW_S
                delta = max(0, round(c.amount - refilled))
            if not delta:
                continue
            bucket = self._shared_bucket(c.scope, c.kind, c.rate_per_min)
            if bucket is None:
                continue
            grew += 1
            if delta > 0:
                bucket.charge(delta)
            else:
                bucket.refund(-delta)
        if current != self._seen_window:
            self._seen_window = current
            self._seen = {k: v for k, v in seen.items() if now_wall - v[1] < FORGET_SEEN_S}
        return grew

    def _shared_bucket(self, scope: str, kind: str, rate_per_min: int) -> TokenBucket | None:
        # A bucket this control plane holds keeps its own rate (the limits it
        # read); one it lacks starts from the rate the writer counted against.
        bucket = self._buckets.get((scope, kind))
        if bucket is None and rate_per_min > 0:
            bucket = self._buckets[(scope, kind)] = TokenBucket(rate_per_min, self._clock)
        return bucket
