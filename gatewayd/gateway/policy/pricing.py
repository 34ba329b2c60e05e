"""What a request costs, and the money budgets of keys, projects, teams and organizations.

Money is kept in whole micro-units (a millionth of the currency the prices
are written in) so that sums never drift the way floats do. Prices are per
1,000 tokens, so a cost is rounded — always up: rounding down would make a
stream of tiny requests free, which is exactly the traffic a budget exists
to bound.

A budget is checked before a request is sent and charged after its answer,
so the request that crosses the line is served and the next one is refused.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from gatewayd.gateway.policy.limits import Clock, Limits, Refusal, retry_after_s, scope_label
from llmgw.catalog.price import Price, format_micros

__all__ = ["BudgetTable", "Price", "cost_micros", "format_micros", "is_free"]


def is_free(price: Price) -> bool:
    """Whether a model costs nothing at all.

    It matters beyond arithmetic: a free model stays available to a scope
    whose budget is spent, which is what lets a key with nothing left fall
    back to a model that costs nothing.
    """
    return price.prompt_per_1k == 0 and price.completion_per_1k == 0 and not price.cached_per_1k


def _div_up(n: int, d: int) -> int:
    return -(-n // d)


def cost_micros(
    price: Price, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> int:
    """What an answer cost, in micro-units, rounded up.

    ``cached_tokens`` are counted within ``prompt_tokens``, as OpenAI's usage
    counts them. More cached than prompt is an engine's miscount, not a
    refund, so they are clamped to the prompt.
    """
    prompt = max(0, prompt_tokens)
    cached = min(max(0, cached_tokens), prompt)
    cached_rate = price.cached_per_1k or price.prompt_per_1k
    prompt_cost = _div_up((prompt - cached) * price.prompt_per_1k + cached * cached_rate, 1000)
    completion_cost = _div_up(max(0, completion_tokens) * price.completion_per_1k, 1000)
    return prompt_cost + completion_cost


class BudgetSnapshot(BaseModel):
    """What a ``BudgetTable`` has counted: scope → period ("2026-11", "2026-11-05") → micros."""

    spent: dict[str, dict[str, int]] = {}


class _Periods:
    """The UTC day and month a moment falls in, worked out again only when the day turns."""

    __slots__ = ("day", "day_ends_at", "month", "month_ends_on")

    def __init__(self, now: float) -> None:
        today = datetime.fromtimestamp(now, UTC).date()
        tomorrow = today + timedelta(days=1)
        self.day = today.isoformat()
        self.month = self.day[:7]
        self.day_ends_at = datetime(
            tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=UTC
        ).timestamp()
        first = today.replace(day=1)
        self.month_ends_on = (first + timedelta(days=32)).replace(day=1)

    def current(self, now: float) -> bool:
        return now < self.day_ends_at


class BudgetTable:
    """Money spent per scope per UTC day and month, in memory.

    Only the current day and month are kept: when the day turns, older
    counts are dropped, which bounds memory to the scopes active this month.
    The caller persists it through ``snapshot``/``load`` (and several
    gateways each count only what they served).
    """

    def __init__(self, clock: Clock = time.time) -> None:
        # Wall-clock time, not monotonic: budgets follow the calendar.
        self._clock = clock
        self._spent: dict[tuple[str, str], int] = {}
        self._periods = _Periods(clock())

    def _now_periods(self) -> tuple[float, _Periods]:
        now = self._clock()
        if not self._periods.current(now):
            self._periods = _Periods(now)
            keep = {self._periods.day, self._periods.month}
            self._spent = {k: v for k, v in self._spent.items() if k[1] in keep}
        return now, self._periods

    def spent(self, scope: str, period: str) -> int:
        """Micro-units a scope spent in a period ("2026-11" or "2026-11-05"; 0 if none)."""
        self._now_periods()
        return self._spent.get((scope, period), 0)

    def check(
        self, scopes: Sequence[tuple[str, Limits]], *, price: Price | None = None
    ) -> Refusal | None:
        """Refuse a request if any of its scopes has spent its budget (None lets it through).

        A spent monthly budget refuses without ``Retry-After``: waiting
        until the month turns is not what a client's retry is for, and
        without it clients report the refusal at once. A spent daily budget
        says when the day turns. A free ``price`` is never refused.
        """
        if price is not None and is_free(price):
            return None
        now, periods = self._now_periods()
        day_refusal: Refusal | None = None
        for scope, limits in scopes:
            month_budget = limits.budget_month_micros
            if (
                month_budget is not None
                and self._spent.get((scope, periods.month), 0) >= month_budget
            ):
                return Refusal(
                    scope=scope,
                    limit="budget_month",
                    message=f"{scope_label(scope)}: its monthly budget of "
                    f"{format_micros(month_budget)} is spent; it renews on "
                    f"{periods.month_ends_on.isoformat()} (UTC), or an administrator may raise it",
                    retry_after_s=None,
                )
            day_budget = limits.budget_day_micros
            if (
                day_refusal is None
                and day_budget is not None
                and self._spent.get((scope, periods.day), 0) >= day_budget
            ):
                day_refusal = Refusal(
                    scope=scope,
                    limit="budget_day",
                    message=f"{scope_label(scope)}: its daily budget of "
                    f"{format_micros(day_budget)} is spent; it renews at 00:00 UTC",
                    retry_after_s=retry_after_s(periods.day_ends_at - now),
                )
        return day_refusal

    def record(self, scopes: Sequence[tuple[str, Limits]], micros: int) -> None:
        """Add what an answer cost to each of its scopes' day and month.

        Every scope is counted, budget or not, so that a budget set in the
        middle of a month sees what was already spent.
        """
        if micros <= 0:
            return
        _, periods = self._now_periods()
        spent = self._spent
        for scope, _ in scopes:
            for period in (periods.day, periods.month):
                spent[(scope, period)] = spent.get((scope, period), 0) + micros

    def snapshot(self) -> BudgetSnapshot:
        """What is counted now, to be written by the caller."""
        self._now_periods()
        out: dict[str, dict[str, int]] = {}
        for (scope, period), micros in self._spent.items():
            out.setdefault(scope, {})[period] = micros
        return BudgetSnapshot(spent=out)

    def load(self, snapshot: BudgetSnapshot) -> None:
        """Replace what is counted with a snapshot; periods already over are left out."""
        _, periods = self._now_periods()
        keep = {periods.day, periods.month}
        self._spent = {
            (scope, period): micros
            for scope, by_period in snapshot.spent.items()
            for period, micros in by_period.items()
            if period in keep
        }
