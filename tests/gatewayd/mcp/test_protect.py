"""MCP protection: a rate per caller and server, a breaker per server, on a clock the test moves."""

from __future__ import annotations

import pytest

from gatewayd.gateway.policy.limits import IDLE_S
from gatewayd.mcp.protect import CLOSED, HALF_OPEN, OPEN, TRIAL_OUT_WAIT_S, Breakers, RateBuckets


class FakeClock:
    """Seconds that move only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --- rate ---------------------------------------------------------------------------------------


def test_a_key_may_spend_its_whole_minute_at_once_and_the_next_call_waits_for_a_token():
    clock = FakeClock()
    rates = RateBuckets(clock)
    for _ in range(60):
        assert rates.take("key_a", "hr", 60) == 0.0
    wait = rates.take("key_a", "hr", 60)
    assert wait == pytest.approx(1.0)


def test_tokens_come_back_at_the_rate_a_second():
    clock = FakeClock()
    rates = RateBuckets(clock)
    for _ in range(6):
        rates.take("key_a", "hr", 6)
    # 6 a minute: one token every 10 s.
    assert rates.take("key_a", "hr", 6) == pytest.approx(10.0)
    clock.advance(4)
    assert rates.take("key_a", "hr", 6) == pytest.approx(6.0)
    clock.advance(6)
    assert rates.take("key_a", "hr", 6) == 0.0
    assert rates.take("key_a", "hr", 6) == pytest.approx(10.0)


def test_a_refused_call_takes_nothing_so_retrying_early_does_not_push_the_caller_back():
    # Guards: a refusal that spent a token made a client retrying every second wait for ever.
    clock = FakeClock()
    rates = RateBuckets(clock)
    rates.take("key_a", "hr", 1)
    for _ in range(10):
        assert rates.take("key_a", "hr", 1) > 0
    clock.advance(60)
    assert rates.take("key_a", "hr", 1) == 0.0


def test_each_key_and_each_server_has_its_own_allowance():
    rates = RateBuckets(FakeClock())
    assert rates.take("key_a", "hr", 1) == 0.0
    assert rates.take("key_a", "hr", 1) > 0
    assert rates.take("key_b", "hr", 1) == 0.0
    assert rates.take("key_a", "wiki", 1) == 0.0


def test_a_rate_of_zero_is_no_limit_and_keeps_no_bucket():
    rates = RateBuckets(FakeClock())
    for _ in range(10_000):
        assert rates.take("key_a", "hr", 0) == 0.0
    assert len(rates) == 0


def test_a_lowered_rate_applies_at_once_counting_what_was_already_sent():
    rates = RateBuckets(FakeClock())
    for _ in range(2):
        rates.take("key_a", "hr", 100)
    assert rates.take("key_a", "hr", 2) > 0


def test_idle_full_buckets_are_forgotten_and_busy_ones_kept():
    clock = FakeClock()
    rates = RateBuckets(clock, idle_s=IDLE_S)
    for i in range(50):
        rates.take(f"key_{i}", "hr", 60)
    clock.advance(IDLE_S / 2)
    rates.take("key_busy", "hr", 60)
    clock.advance(IDLE_S / 2)
    rates.take("key_busy", "hr", 60)
    # The sweep ran on that take: the 50 quiet buckets are full again and gone.
    assert len(rates) == 1


def test_a_removed_server_forgets_every_keys_bucket_there():
    rates = RateBuckets(FakeClock())
    rates.take("key_a", "hr", 1)
    rates.take("key_b", "hr", 1)
    rates.take("key_a", "wiki", 1)
    rates.forget_server("hr")
    assert len(rates) == 1
    assert rates.take("key_a", "hr", 1) == 0.0


# --- breaker ------------------------------------------------------------------------------------


def test_a_server_stays_admitted_until_it_fails_the_set_number_of_times_in_a_row():
    clock = FakeClock()
    b = Breakers(failures=3, open_s=30, clock=clock)
    for _ in range(2):
        b.failure("hr", "connection refused")
        assert b.admit("hr") == 0.0
    # Below the threshold nothing is shown: McpServerView.breaker_reason is "" while closed.
    assert b.state("hr") == (CLOSED, "")
    b.failure("hr", "no answer in 5 s")
    assert b.admit("hr") == pytest.approx(30.0)
    assert b.state("hr") == (OPEN, "no answer in 5 s")
    assert b.admit("wiki") == 0.0


def test_a_success_between_failures_starts_the_count_again():
    b = Breakers(failures=3, open_s=30, clock=FakeClock())
    b.failure("hr", "connection refused")
    b.failure("hr", "connection refused")
    b.success("hr")
    b.failure("hr", "connection refused")
    b.failure("hr", "connection refused")
    assert b.admit("hr") == 0.0
    assert b.state("hr")[0] == CLOSED


def test_an_open_breaker_says_how_long_until_the_trial():
    clock = FakeClock()
    b = Breakers(failures=1, open_s=30, clock=clock)
    b.failure("hr", "connection refused")
    clock.advance(12)
    assert b.admit("hr") == pytest.approx(18.0)


def test_half_open_admits_exactly_one_trial_and_its_success_closes_the_breaker():
    clock = FakeClock()
    b = Breakers(failures=1, open_s=30, clock=clock)
    b.failure("hr", "connection refused")
    clock.advance(30)
    assert b.state("hr") == (HALF_OPEN, "connection refused")
    assert b.admit("hr") == 0.0
    # The trial is out: every other caller waits for its verdict.
    for _ in range(5):
        assert b.admit("hr") == TRIAL_OUT_WAIT_S
    b.success("hr")
    assert b.state("hr") == (CLOSED, "")
    assert b.admit("hr") == 0.0 and b.admit("hr") == 0.0


def test_a_failed_trial_opens_the_breaker_again_for_the_whole_open_time():
    clock = FakeClock()
    b = Breakers(failures=2, open_s=30, clock=clock)
    b.failure("hr", "connection refused")
    b.failure("hr", "connection refused")
    clock.advance(31)
    assert b.admit("hr") == 0.0
    b.failure("hr", "the server answered 502")
    assert b.state("hr") == (OPEN, "the server answered 502")
    assert b.admit("hr") == pytest.approx(30.0)
    clock.advance(30)
    assert b.admit("hr") == 0.0


def test_a_call_that_began_before_the_breaker_opened_does_not_keep_it_open_longer():
    clock = FakeClock()
    b = Breakers(failures=1, open_s=30, clock=clock)
    b.failure("hr", "connection refused")
    clock.advance(10)
    b.failure("hr", "no answer in 5 s")
    assert b.admit("hr") == pytest.approx(20.0)
    assert b.state("hr") == (OPEN, "no answer in 5 s")


def test_a_trial_whose_caller_left_lets_another_trial_through():
    # Guards: a trial cancelled with no verdict left the breaker half-open with no way out.
    clock = FakeClock()
    b = Breakers(failures=1, open_s=30, clock=clock)
    b.failure("hr", "connection refused")
    clock.advance(30)
    assert b.admit("hr") == 0.0
    b.release("hr")
    assert b.admit("hr") == 0.0
    assert b.admit("hr") == TRIAL_OUT_WAIT_S


def test_a_trial_never_heard_from_is_presumed_lost_after_the_open_time():
    clock = FakeClock()
    b = Breakers(failures=1, open_s=30, clock=clock)
    b.failure("hr", "connection refused")
    clock.advance(30)
    assert b.admit("hr") == 0.0
    clock.advance(29)
    assert b.admit("hr") == TRIAL_OUT_WAIT_S
    clock.advance(1)
    assert b.admit("hr") == 0.0


def test_a_forgotten_server_starts_closed():
    b = Breakers(failures=1, open_s=30, clock=FakeClock())
    b.failure("hr", "connection refused")
    b.forget("hr")
    assert b.state("hr") == (CLOSED, "")
    assert b.admit("hr") == 0.0


def test_a_breaker_that_could_never_open_or_close_is_refused():
    with pytest.raises(ValueError, match="at least 1 failure"):
        Breakers(failures=0, open_s=30)
