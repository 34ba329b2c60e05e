"""Rate limits: the strictest level wins, buckets refill by the minute, refusals take nothing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gatewayd.gateway.policy.limits import (
    Limits,
    LimitTable,
    Refusal,
    Ticket,
    TokenBucket,
    resolve,
    retry_after_s,
)


class FakeClock:
    """Seconds that move only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

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
    key_id: str = KEY,
) -> list[tuple[str, Limits]]:
    return [
        (key_id, key or Limits()),
        (PROJECT, project or Limits()),
        (TEAM, team or Limits()),
        (ORG, org or Limits()),
    ]


def admitted(result: Refusal | Ticket) -> Ticket:
    assert isinstance(result, Ticket), result
    return result


def refused(result: Refusal | Ticket) -> Refusal:
    assert isinstance(result, Refusal), result
    return result


# resolve


def test_the_strictest_limit_down_the_tree_wins():
    org = Limits(rpm=600, tpm=100_000, budget_month_micros=50_000_000)
    team = Limits(rpm=120, tpm=200_000)
    project = Limits(rpm=300, budget_month_micros=5_000_000, budget_day_micros=500_000)
    key = Limits(tpm=20_000)

    assert resolve([key, project, team, org]) == Limits(
        rpm=120, tpm=20_000, budget_day_micros=500_000, budget_month_micros=5_000_000
    )


def test_a_level_that_sets_nothing_leaves_the_decision_to_the_others():
    assert resolve([Limits(), Limits(rpm=60), Limits()]) == Limits(rpm=60)


def test_no_level_setting_a_limit_leaves_it_unlimited():
    assert resolve([]) == Limits()
    assert resolve([Limits(), Limits()]).rpm is None


def test_a_rate_of_zero_is_refused_as_a_limit_rather_than_meaning_unlimited():
    # None is unlimited; 0 would silently lock a key out (revoke it instead).
    with pytest.raises(ValidationError):
        Limits(rpm=0)


def test_a_budget_of_zero_is_a_limit_that_allows_only_free_models():
    assert Limits(budget_month_micros=0).budget_month_micros == 0


# TokenBucket


def test_a_bucket_allows_a_minutes_worth_at_once_then_says_how_long_to_wait():
    clock = FakeClock()
    bucket = TokenBucket(60, clock)

    for _ in range(60):
        assert bucket.try_take(1) is None
    assert bucket.try_take(1) == pytest.approx(1.0)


def test_a_bucket_refills_at_its_rate_per_minute():
    clock = FakeClock()
    bucket = TokenBucket(120, clock)
    assert bucket.try_take(120) is None

    clock.advance(5)

    assert bucket.tokens == pytest.approx(10)
    assert bucket.try_take(10) is None
    assert bucket.try_take(1) is not None


def test_a_bucket_never_holds_more_than_a_minutes_worth():
    clock = FakeClock()
    bucket = TokenBucket(60, clock)

    clock.advance(3600)

    assert bucket.tokens == 60


def test_a_refused_take_takes_nothing():
    clock = FakeClock()
    bucket = TokenBucket(60, clock)
    bucket.try_take(50)

    assert bucket.try_take(20) == pytest.approx(10.0)
    assert bucket.tokens == pytest.approx(10)


def test_a_request_bigger_than_a_minutes_allowance_passes_on_a_full_bucket_and_leaves_a_debt():
    # Refusing it forever while Retry-After promised it would pass would make
    # a client retry without end.
    clock = FakeClock()
    bucket = TokenBucket(1000, clock)

    assert bucket.try_take(1500) is None
    assert bucket.tokens == pytest.approx(-500)
    assert bucket.try_take(1) == pytest.approx(30.06)


def test_an_answer_that_used_more_than_its_estimate_is_charged_in_full():
    clock = FakeClock()
    bucket = TokenBucket(600, clock)

    bucket.charge(900)

    assert bucket.tokens == pytest.approx(-300)


def test_a_refund_never_fills_a_bucket_past_full():
    clock = FakeClock()
    bucket = TokenBucket(600, clock)
    bucket.try_take(100)

    bucket.refund(500)

    assert bucket.tokens == 600


def test_a_changed_rate_keeps_what_was_spent_in_the_last_minute():
    clock = FakeClock()
    bucket = TokenBucket(100, clock)
    bucket.try_take(10)

    bucket.set_rate(50)

    assert bucket.tokens == 40
    assert bucket.rate_per_min == 50


def test_retry_after_is_rounded_up_to_a_whole_second_and_never_zero():
    assert retry_after_s(0.2) == 1
    assert retry_after_s(1.0) == 1
    assert retry_after_s(1.01) == 2
    assert retry_after_s(0.0) == 1
    # Float noise around a whole second does not cost a client another second.
    assert retry_after_s(2.0000000000004) == 2


# LimitTable


def test_a_key_within_its_limits_is_let_through():
    table = LimitTable(FakeClock())

    admitted(table.admit(scopes(key=Limits(rpm=10, tpm=1000)), est_tokens=100))


def test_a_key_over_its_rate_is_refused_naming_the_key_the_limit_and_when_to_return():
    table = LimitTable(FakeClock())
    limits = scopes(key=Limits(rpm=2))
    admitted(table.admit(limits, 10))
    admitted(table.admit(limits, 10))

    refusal = refused(table.admit(limits, 10))

    assert refusal.scope == KEY
    assert refusal.limit == "rpm"
    assert refusal.status == 429
    assert refusal.retry_after_s == 30
    assert refusal.message.startswith("key k_1: 2 requests per minute")


def test_a_projects_rate_is_shared_by_all_its_keys():
    table = LimitTable(FakeClock())
    project = Limits(rpm=60)
    for i in range(60):
        admitted(table.admit(scopes(project=project, key_id=f"key:k_{i}"), 10))

    refusal = refused(table.admit(scopes(project=project, key_id="key:k_new"), 10))

    assert refusal.scope == PROJECT
    assert refusal.message.startswith("project Acme/ml/search: 60 requests per minute")
    assert refusal.retry_after_s == 1


def test_tokens_a_minute_are_counted_from_the_estimate():
    table = LimitTable(FakeClock())
    limits = scopes(team=Limits(tpm=6000))
    admitted(table.admit(limits, 5000))

    refusal = refused(table.admit(limits, 2000))

    assert (refusal.scope, refusal.limit) == (TEAM, "tpm")
    assert refusal.retry_after_s == 10
    assert refusal.message.startswith("team Acme/ml: 6,000 tokens per minute")


def test_a_refusal_takes_nothing_from_any_bucket():
    # A request refused by its organization must not spend its key's
    # allowance, or a busy organization would lock its quiet keys out for
    # longer than it is busy.
    clock = FakeClock()
    table = LimitTable(clock)
    org_busy = scopes(key=Limits(rpm=1, tpm=1000), org=Limits(tpm=100))
    admitted(table.admit(scopes(org=Limits(tpm=100), key_id="key:other"), 100))

    refused(table.admit(org_busy, 50))
    clock.advance(30)  # the organization's 50 tokens are back; a taken key request would not be

    admitted(table.admit(org_busy, 50))


def test_the_refusal_names_the_limit_that_holds_longest():
    # Naming the first limit found would send the client back when another
    # still holds, to be refused again.
    table = LimitTable(FakeClock())
    both = scopes(key=Limits(tpm=6000), org=Limits(rpm=2))
    admitted(table.admit(both, 5000))
    admitted(table.admit(both, 0))

    refusal = refused(table.admit(both, 2000))  # the key's tokens in 10 s, the org's rate in 30 s

    assert (refusal.scope, refusal.limit) == (ORG, "rpm")
    assert refusal.retry_after_s == 30


def test_settling_charges_the_tokens_an_answer_used_beyond_its_estimate():
    clock = FakeClock()
    table = LimitTable(clock)
    limits = scopes(key=Limits(tpm=6000), project=Limits(tpm=6000))
    ticket = admitted(table.admit(limits, 1000))

    ticket.settle(4000)

    refusal = refused(table.admit(limits, 3000))
    assert refusal.retry_after_s == 10


def test_settling_gives_back_what_an_estimate_took_and_the_answer_did_not_use():
    table = LimitTable(FakeClock())
    limits = scopes(project=Limits(tpm=6000))
    ticket = admitted(table.admit(limits, 5000))
    refused(table.admit(limits, 2000))

    ticket.settle(1000)

    admitted(table.admit(limits, 5000))


def test_settling_twice_charges_once():
    table = LimitTable(FakeClock())
    limits = scopes(key=Limits(tpm=6000))
    ticket = admitted(table.admit(limits, 0))

    ticket.settle(3000)
    ticket.settle(3000)

    admitted(table.admit(limits, 3000))


def test_a_changed_limit_applies_to_a_scope_already_seen():
    table = LimitTable(FakeClock())
    admitted(table.admit(scopes(key=Limits(rpm=100)), 0))
    admitted(table.admit(scopes(key=Limits(rpm=100)), 0))

    refusal = refused(table.admit(scopes(key=Limits(rpm=2)), 0))

    assert refusal.message.startswith("key k_1: 2 requests per minute")
    assert refusal.retry_after_s == 30


def test_a_request_with_no_limits_anywhere_is_let_through_and_holds_nothing():
    table = LimitTable(FakeClock())

    for _ in range(1000):
        admitted(table.admit(scopes(), 10_000))
    assert len(table) == 0


def test_buckets_of_scopes_not_seen_for_a_while_are_dropped():
    clock = FakeClock()
    table = LimitTable(clock, idle_s=600)
    for i in range(100):
        admitted(table.admit(scopes(key=Limits(rpm=10), key_id=f"key:k_{i}"), 0))
    assert len(table) == 100

    clock.advance(601)
    admitted(table.admit(scopes(key=Limits(rpm=10), key_id="key:k_fresh"), 0))

    assert len(table) == 1


def test_a_bucket_in_debt_is_kept_until_it_is_paid_off():
    # Forgetting it would forgive the debt: a new bucket starts full.
    clock = FakeClock()
    table = LimitTable(clock, idle_s=600)
    ticket = admitted(table.admit(scopes(key=Limits(tpm=1000)), 0))
    ticket.settle(20_000)  # 20 minutes' worth, owed for 19 of them

    clock.advance(601)
    table.admit(scopes(key_id="key:other"), 0)
    assert len(table) == 1

    clock.advance(600)
    table.admit(scopes(key_id="key:other"), 0)
    assert len(table) == 0
