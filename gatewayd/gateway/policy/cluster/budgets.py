"""Money budgets that hold across control planes: what this one charged, and the others'.

``SharedBudgetTable`` is the gateway's ``BudgetTable`` with two more books:
what this process charged itself (its running totals, written to the store
by ``CounterSync``) and, per other control plane run, the total last counted
from it. ``absorb`` adds the growth of the others' totals to the counts the
hot path checks, so a scope spent through any control plane is spent on all
of them within a sync. The hot path itself is unchanged: a dict lookup per
scope on the check, a few dict additions on the charge, no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta

from gatewayd.gateway.policy.limits import Clock, Limits
from gatewayd.gateway.policy.pricing import BudgetTable
from gatewayd.store.counter_records import SharedCounter

SPEND = "spend"


def period_expires_at(period: str) -> datetime:
    """When a budget period's rows may go: a day after the day or month ends (UTC).

    A day of margin, so that a control plane whose clock runs a little late
    still finds the totals of the period it believes current.
    """
    if len(period) == 7:  # "2026-11"
        first = date.fromisoformat(period + "-01")
        end = (first + timedelta(days=32)).replace(day=1)
    else:  # "2026-11-05"
        end = date.fromisoformat(period) + timedelta(days=1)
    return datetime(end.year, end.month, end.day, tzinfo=UTC) + timedelta(days=1)


class SharedBudgetTable(BudgetTable):
    """Money spent per scope per UTC day and month: this control plane's and the others'."""

    def __init__(self, clock: Clock = time.time) -> None:
        super().__init__(clock)
        # (scope, period) → micro-units this process charged since it started, and as
        # last written. The hot path only adds to the first; the sync finds what changed.
        self._own: dict[tuple[str, str], int] = {}
        self._written: dict[tuple[str, str], int] = {}
        # (writer, scope, period) → the writer's total as last counted here.
        self._seen: dict[tuple[str, str, str], int] = {}
        self._kept_periods: tuple[str, str] = (self._periods.day, self._periods.month)

    def record(self, scopes: Sequence[tuple[str, Limits]], micros: int) -> None:
        super().record(scopes, micros)
        if micros <= 0:
            return
        periods = self._periods  # brought up to date by super().record
        day, month, own = periods.day, periods.month, self._own
        for scope, _ in scopes:
            key = (scope, day)
            own[key] = own.get(key, 0) + micros
            key = (scope, month)
            own[key] = own.get(key, 0) + micros

    def own_spent(self, scope: str, period: str) -> int:
        """What this control plane alone charged a scope in a period since it started."""
        return self._own.get((scope, period), 0)

    def pending(self, writer: str) -> list[SharedCounter]:
        """This process's totals that changed since the last call, as rows for the store."""
        self._forget_past_periods()
        rows = []
        written = self._written
        for key, total in self._own.items():
            if written.get(key) != total:
                written[key] = total
                scope, period = key
                rows.append(
                    SharedCounter(writer, scope, SPEND, period, total, period_expires_at(period))
                )
        return rows

    def unsent(self, rows: Iterable[SharedCounter]) -> None:
        """Rows ``pending`` gave that the store did not take: sent again next time."""
        for c in rows:
            if c.kind == SPEND:
                self._written.pop((c.scope, c.period), None)

    def absorb(self, rows: Iterable[SharedCounter], *, count: bool = True) -> int:
        """Count the growth of other control planes' totals; the micro-units added.

        ``count=False`` only notes the totals: at start, what the others had
        charged until then is already in the usage rows the table was loaded
        from, and must not be counted twice.
        """
        self._forget_past_periods()
        current = self._kept_periods
        seen, spent = self._seen, self._spent
        added = 0
        for c in rows:
            if c.kind != SPEND or c.period not in current:
                continue
            key = (c.writer, c.scope, c.period)
            before = seen.get(key, 0)
            seen[key] = c.amount
            delta = c.amount - before
            if count and delta:
                at = (c.scope, c.period)
                spent[at] = spent.get(at, 0) + delta
                added += delta
        return added

    def _forget_past_periods(self) -> None:
        _, periods = self._now_periods()
        kept = (periods.day, periods.month)
        if kept == self._kept_periods:
            return
        self._kept_periods = kept
        self._own = {k: v for k, v in self._own.items() if k[1] in kept}
        self._written = {k: v for k, v in self._written.items() if k[1] in kept}
        self._seen = {k: v for k, v in self._seen.items() if k[2] in kept}
