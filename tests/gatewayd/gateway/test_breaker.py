"""Breakers: a target failing in a row is left alone, longer each time, and tried once after."""

from __future__ import annotations

from gatewayd.gateway.routing.breaker import (
    CLOSED,
    FAILURES_TO_OPEN,
    HALF_OPEN,
    OPEN,
    OPEN_BASE_S,
    OPEN_MAX_S,
    RETRY_AFTER_MAX_S,
    Breakers,
)


class FakeClock:
    """Seconds that move only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_a_target_stays_usable_until_it_fails_the_set_number_of_times_in_a_row():
    clock = FakeClock()
    b = Breakers(clock)
    for _ in range(FAILURES_TO_OPEN - 1):
        assert b.failure("r1") == 0
        assert b.usable("r1") and b.state("r1") == CLOSED
    assert b.failure("r1") == OPEN_BASE_S
    assert not b.usable("r1") and b.state("r1") == OPEN
    assert b.usable("r2")


def test_a_success_between_failures_starts_the_count_again():
    b = Breakers(FakeClock())
    for _ in range(FAILURES_TO_OPEN - 1):
        b.failure("r1")
    b.success("r1")
    for _ in range(FAILURES_TO_OPEN - 1):
        b.failure("r1")
    assert b.state("r1") == CLOSED


def test_after_the_wait_one_trial_goes_through_and_its_success_closes_the_breaker():
    clock = FakeClock()
    b = Breakers(clock)
    b.failure("r1", at_once=True)
    clock.advance(OPEN_BASE_S)
    assert b.state("r1") == HALF_OPEN and b.usable("r1")
    b.begin("r1")
    # The trial is out: nobody else goes there until it comes back.
    assert not b.usable("r1")
    b.success("r1")
    assert b.state("r1") == CLOSED and b.usable("r1") and len(b) == 0


def test_a_failed_trial_opens_it_again_for_twice_as_long_up_to_the_cap():
    clock = FakeClock()
    b = Breakers(clock)
    waits = [b.failure("r1", at_once=True)]
    for _ in range(10):
        clock.advance(waits[-1])
        b.begin("r1")
        waits.append(b.failure("r1"))
    assert waits[:4] == [OPEN_BASE_S, 2 * OPEN_BASE_S, 4 * OPEN_BASE_S, 8 * OPEN_BASE_S]
    assert max(waits) == OPEN_MAX_S == waits[-1]


def test_a_trial_whose_client_left_frees_the_trial_for_another_request():
    # Guards against a breaker stuck half-open with a trial nobody will finish.
    clock = FakeClock()
    b = Breakers(clock)
    b.failure("r1", at_once=True)
    clock.advance(OPEN_BASE_S)
    b.begin("r1")
    b.release("r1")
    assert b.usable("r1")


def test_a_providers_retry_after_sets_the_wait_within_a_cap():
    clock = FakeClock()
    b = Breakers(clock)
    assert b.failure("k1", at_once=True, retry_after_s=30) == 30
    assert b.failure("k2", at_once=True, retry_after_s=10**6) == RETRY_AFTER_MAX_S


def test_failures_of_requests_sent_before_it_opened_do_not_lengthen_the_wait():
    clock = FakeClock()
    b = Breakers(clock)
    b.failure("r1", at_once=True)
    clock.advance(1)
    assert b.failure("r1") == OPEN_BASE_S - 1
    clock.advance(OPEN_BASE_S - 1)
    assert b.state("r1") == HALF_OPEN


def test_open_now_lists_what_is_out_and_forget_drops_gone_targets():
    b = Breakers(FakeClock())
    b.failure("r1", at_once=True)
    b.failure("r2")
    assert set(b.open_now()) == {"r1"}
    b.forget(lambda key: key != "r1")
    assert b.open_now() == {} and len(b) == 1
