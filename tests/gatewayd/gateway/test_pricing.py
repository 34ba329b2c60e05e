"""Prices in micro-units, rounded up, and budgets per scope per UTC day and month."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from gatewayd.gateway.policy.limits import Limits
from gatewayd.gateway.policy.pricing import (
    BudgetSnapshot,
    BudgetTable,
    Price,
    cost_micros,
    format_micros,
    is_free,
)


class FakeClock:
    """Wall-clock seconds that move only when a test says so."""

    def __init__(self, *when: int) -> None:
        self.now = datetime(*when, tzinfo=UTC).timestamp()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


KEY = "key:k_1"
PROJECT = "project:Acme/ml/search"
TEAM = "team:Acme/ml"
ORG = "org:Acme"


def scopes(
    key: Limits | None = None,
    project: Limits | None = None,
    team: Limits | None = None,
    org: Limits | None = None,
) -> list[tuple[str, Limits]]:
    return [
        (KEY, key or Limits()),
        (PROJECT, project or Limits()),
        (TEAM, team or Limits()),
        (ORG, org or Limits()),
    ]


# cost_micros


def test_cost_rounds_up_so_small_requests_are_not_free():
    # Rounding down would make a stream of tiny requests cost nothing, the
    # very traffic a budget exists to bound.
    price = Price(prompt_per_1k=1000, completion_per_1k=3000)

    assert cost_micros(price, 1, 0) == 1
    assert cost_micros(price, 0, 1) == 3
    assert cost_micros(price, 1000, 1000) == 4000


def test_an_empty_request_costs_nothing():
    assert cost_micros(Price(prompt_per_1k=1000, completion_per_1k=3000), 0, 0) == 0


def test_a_cached_prompt_costs_the_cached_rate():
    price = Price(prompt_per_1k=1000, cached_per_1k=100, completion_per_1k=3000)

    # 10,000 prompt tokens of which 9,000 came from the cache: 1,000 at the
    # prompt rate, 9,000 at the cached one.
    assert cost_micros(price, 10_000, 0, cached_tokens=9_000) == 1000 + 900


def test_more_cached_tokens_than_prompt_tokens_are_a_miscount_not_a_refund():
    price = Price(prompt_per_1k=1000, cached_per_1k=100)

    assert cost_micros(price, 100, 0, cached_tokens=500) == 10


def test_without_a_cached_rate_cached_tokens_cost_what_any_prompt_token_does():
    assert cost_micros(Price(prompt_per_1k=1000), 10_000, 0, cached_tokens=9_000) == 10_000
    # 0 is how configurations written before the cached rate said "none".
    zero = Price(prompt_per_1k=1000, cached_per_1k=0)
    assert cost_micros(zero, 10_000, 0, cached_tokens=9_000) == 10_000


def test_a_negative_count_from_an_engine_costs_nothing_rather_than_paying_back():
    assert cost_micros(Price(prompt_per_1k=1000, completion_per_1k=1000), -50, -50, -50) == 0


def test_a_price_cannot_be_negative():
    with pytest.raises(ValidationError):
        Price(prompt_per_1k=-1)


def test_only_a_model_with_every_rate_zero_is_free():
    assert is_free(Price())
    assert is_free(Price(cached_per_1k=0))
    assert not is_free(Price(completion_per_1k=1))
    assert not is_free(Price(cached_per_1k=1))


def test_money_is_shown_in_whole_units():
    assert format_micros(5_000_000) == "5.00"
    assert format_micros(1_234_567) == "1.234567"
    assert format_micros(1) == "0.000001"
    assert format_micros(12_500_000_000) == "12,500.00"


# BudgetTable


def test_a_scope_within_its_budget_is_let_through():
    table = BudgetTable(FakeClock(2026, 11, 5, 12))
    limits = scopes(project=Limits(budget_month_micros=5_000_000))

    table.record(limits, 4_999_999)

    assert table.check(limits) is None


def test_a_spent_monthly_budget_refuses_naming_the_scope_and_without_retry_after():
    # Waiting will not help before the month turns, and a client that sees
    # no Retry-After reports the refusal at once rather than retrying.
    table = BudgetTable(FakeClock(2026, 11, 5, 12))
    limits = scopes(project=Limits(budget_month_micros=5_000_000))

    table.record(limits, 5_000_000)
    refusal = table.check(limits)

    assert refusal is not None
    assert (refusal.scope, refusal.limit, refusal.status) == (PROJECT, "budget_month", 429)
    assert refusal.retry_after_s is None
    assert refusal.message.startswith(
        "project Acme/ml/search: its monthly budget of 5.00 is spent; it renews on 2026-12-01"
    )


def test_a_spent_daily_budget_says_when_the_day_turns():
    table = BudgetTable(FakeClock(2026, 11, 5, 23, 59, 30))
    limits = scopes(key=Limits(budget_day_micros=1000))

    table.record(limits, 1000)
    refusal = table.check(limits)

    assert refusal is not None
    assert (refusal.scope, refusal.limit) == (KEY, "budget_day")
    assert refusal.retry_after_s == 30


def test_a_spent_monthly_budget_is_named_before_a_spent_daily_one():
    # The day turning would not let the request through, so no Retry-After.
    table = BudgetTable(FakeClock(2026, 11, 5, 12))
    limits = scopes(key=Limits(budget_day_micros=10), org=Limits(budget_month_micros=10))

    table.record(limits, 10)
    refusal = table.check(limits)

    assert refusal is not None
    assert (refusal.scope, refusal.retry_after_s) == (ORG, None)


def test_every_level_counts_what_its_requests_spent():
    table = BudgetTable(FakeClock(2026, 11, 5, 12))
    other_project = [("key:k_2", Limits()), ("project:Acme/ml/chat", Limits()), (TEAM, Limits())]

    table.record(scopes(), 700)
    table.record(other_project, 300)

    assert table.spent(KEY, "2026-11") == 700
    assert table.spent(PROJECT, "2026-11-05") == 700
    assert table.spent(TEAM, "2026-11") == 1000
    refusal = table.check(scopes(team=Limits(budget_month_micros=1000)))
    assert refusal is not None and refusal.scope == TEAM


def test_a_budget_set_in_the_middle_of_a_month_sees_what_was_already_spent():
    table = BudgetTable(FakeClock(2026, 11, 5, 12))
    table.record(scopes(), 2000)

    assert table.check(scopes(project=Limits(budget_month_micros=1000))) is not None


def test_a_new_month_starts_from_nothing_and_forgets_the_old_one():
    clock = FakeClock(2026, 11, 30, 23, 0)
    table = BudgetTable(clock)
    limits = scopes(project=Limits(budget_month_micros=1000))
    table.record(limits, 1000)
    assert table.check(limits) is not None

    clock.advance(3600)

    assert table.check(limits) is None
    assert table.spent(PROJECT, "2026-11") == 0
    assert table.snapshot() == BudgetSnapshot()


def test_a_new_day_keeps_the_month():
    clock = FakeClock(2026, 11, 5, 23, 0)
    table = BudgetTable(clock)
    limits = scopes(key=Limits(budget_day_micros=100, budget_month_micros=1000))
    table.record(limits, 100)
    assert table.check(limits) is not None

    clock.advance(3600)

    assert table.check(limits) is None
    assert table.spent(KEY, "2026-11") == 100


def test_a_free_model_stays_available_when_the_budget_is_spent():
    # This is what makes a budget fallback work: a key with nothing left can
    # still be served something that costs nothing.
    table = BudgetTable(FakeClock(2026, 11, 5, 12))
    limits = scopes(key=Limits(budget_month_micros=0))

    assert table.check(limits, price=Price()) is None
    assert table.check(limits, price=Price(prompt_per_1k=1)) is not None


def test_a_scope_without_a_budget_is_never_refused():
    table = BudgetTable(FakeClock(2026, 11, 5, 12))
    table.record(scopes(), 10**12)

    assert table.check(scopes()) is None


def test_what_was_spent_survives_a_restart_through_a_snapshot():
    clock = FakeClock(2026, 11, 5, 12)
    table = BudgetTable(clock)
    table.record(scopes(), 1234)
    written = table.snapshot().model_dump_json()

    restarted = BudgetTable(clock)
    restarted.load(BudgetSnapshot.model_validate_json(written))

    assert restarted.spent(ORG, "2026-11") == 1234
    assert restarted.spent(KEY, "2026-11-05") == 1234


def test_a_snapshot_from_an_earlier_month_loads_as_nothing_spent():
    table = BudgetTable(FakeClock(2026, 12, 1, 0, 5))
    table.load(BudgetSnapshot(spent={PROJECT: {"2026-11": 5000, "2026-11-30": 5000}}))

    assert table.snapshot() == BudgetSnapshot()
