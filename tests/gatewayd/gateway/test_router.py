"""The router: profiles order a model's targets; breakers and measured answers change the order."""

from __future__ import annotations

from collections import Counter

import pytest

from gatewayd.gateway.metering.scrape import EngineStats
from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.routing.breaker import FAILURES_TO_OPEN, OPEN_BASE_S
from gatewayd.gateway.routing.router import PROFILES, TTFT_FORGET_S, Router, Target, parse_profile


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


A, B, C = (Target(f"m-{x}", f"http://10.0.0.{i}:8000") for i, x in enumerate("abc", 1))


def router(targets=(A, B, C), stats=None, clock=None, rng=None) -> Router:
    stats = stats or {}
    return Router(
        lambda model: list(targets) if model == "m" else [],
        stats.get,
        clock=clock or FakeClock(),
        rng=rng or (lambda: 0.5),
    )


def ids(targets) -> list[str]:
    return [t.replica_id for t in targets]


def test_the_profile_header_names_one_of_three_profiles_and_defaults_to_chat():
    assert PROFILES == ("chat", "batch", "long-context")
    assert parse_profile("") == "chat" and parse_profile(" batch ") == "batch"
    with pytest.raises(ApiError) as err:
        parse_profile("fastest")
    assert err.value.status == 400 and err.value.param == "x-llmgw-profile"
    assert "fastest" in err.value.message and "long-context" in err.value.message
    with pytest.raises(ValueError):
        router().candidates("m", profile="fastest")


def test_an_unknown_model_has_no_candidates():
    assert router().candidates("other") == []


def test_a_session_sticks_to_one_replica_whatever_the_load():
    r = router()
    first = r.candidates("m", session="alice")[0]
    for _ in range(5):
        r.begin(first)
    assert r.candidates("m", session="alice")[0] == first
    # Sessions spread over the replicas.
    firsts = Counter(r.candidates("m", session=f"user-{i}")[0] for i in range(300))
    assert set(firsts) == {A, B, C} and min(firsts.values()) > 50


def test_a_replica_leaving_moves_only_the_sessions_it_had():
    before = {s: router().candidates("m", session=s)[0] for s in map(str, range(200))}
    after = {s: router((A, B)).candidates("m", session=s)[0] for s in before}
    moved = [s for s in before if before[s] != after[s]]
    assert moved and all(before[s] == C for s in moved)


def test_chat_prefers_the_replica_answering_soonest_and_tries_one_not_yet_measured():
    r = router((A, B))
    r.observe_ttft(A, 0.2)
    r.observe_ttft(B, 0.4)
    assert ids(r.candidates("m")) == ["m-a", "m-b"]
    # C has no measure yet: it scores as the fastest, so it is tried.
    r = router((A, B, C))
    r.observe_ttft(A, 0.2)
    r.observe_ttft(B, 0.4)
    assert ids(r.candidates("m"))[-1] == "m-b"


def test_a_slow_measure_is_forgotten_after_five_minutes_without_an_answer():
    # Guards against a replica found slow once and then never tried again.
    clock = FakeClock()
    r = router((A, B), clock=clock)
    r.observe_ttft(A, 0.1)
    r.observe_ttft(B, 2.0)
    assert r.candidates("m")[0] == A
    clock.advance(TTFT_FORGET_S + 1)
    assert r.ttft("m-b") is None
    r.observe_ttft(B, 0.05)
    assert r.ttft("m-b") == 0.05  # a fresh start, not smoothed with the old figure


def test_ttft_is_smoothed_not_replaced_by_one_answer():
    r = router()
    r.observe_ttft(A, 1.0)
    r.observe_ttft(A, 0.0)
    assert 0.5 < r.ttft("m-a") < 1.0


def test_chat_weighs_in_flight_and_the_engines_queue():
    r = router((A, B))
    r.begin(A)
    r.begin(A)
    assert r.candidates("m")[0] == B
    r.end(A)
    r.end(A)
    busy = {"m-b": EngineStats(waiting=8, running=4, kv_usage=0.9)}
    assert router((A, B), stats=busy).candidates("m")[0] == A


def test_batch_takes_the_shortest_queue_and_long_context_the_most_free_kv_cache():
    stats = {
        "m-a": EngineStats(waiting=5, running=1, kv_usage=0.1),
        "m-b": EngineStats(waiting=0, running=8, kv_usage=0.9),
        "m-c": EngineStats(waiting=2, running=2, kv_usage=0.5),
    }
    r = router(stats=stats)
    assert ids(r.candidates("m", profile="batch")) == ["m-b", "m-c", "m-a"]
    assert ids(r.candidates("m", profile="long-context")) == ["m-a", "m-c", "m-b"]


def test_batch_counts_what_the_gateway_sent_before_the_scraped_queue_which_is_older():
    # The scrape says m-b is idle, but this gateway has since sent it three
    # requests: the next goes to a replica with fewer of ours in flight.
    stats = {"m-a": EngineStats(waiting=1), "m-b": EngineStats(waiting=0)}
    r = router((A, B), stats=stats)
    for _ in range(3):
        r.begin(B)
    r.begin(A)
    assert ids(r.candidates("m", profile="batch")) == ["m-a", "m-b"]


def test_equal_replicas_share_the_traffic():
    import random

    rnd = random.Random(7)
    r = Router(lambda m: [A, B, C], clock=FakeClock(), rng=rnd.random)
    firsts = Counter(r.candidates("m", profile="batch")[0] for _ in range(300))
    assert set(firsts) == {A, B, C}


def test_a_replica_whose_breaker_is_open_is_left_out_until_its_trial():
    clock = FakeClock()
    r = router((A, B), clock=clock)
    for _ in range(FAILURES_TO_OPEN):
        r.failed(A)
    assert r.candidates("m") == [B]
    assert r.breaker_state(A) == "open"
    clock.advance(OPEN_BASE_S)
    assert A in r.candidates("m")
    r.begin(A)
    assert r.candidates("m") == [B]  # one trial at a time
    r.succeeded(A)
    r.end(A)
    assert set(r.candidates("m")) == {A, B} and r.breaker_state(A) == "closed"


def test_when_every_breaker_is_open_all_are_tried_soonest_to_reopen_first():
    clock = FakeClock()
    r = router((A, B), clock=clock)
    r.failed(B, 0)
    for _ in range(FAILURES_TO_OPEN):
        r.failed(B)
    clock.advance(1)
    for _ in range(FAILURES_TO_OPEN):
        r.failed(A)
    assert ids(r.candidates("m")) == ["m-b", "m-a"]


def key(n: int, weight: int = 1) -> Target:
    return Target(
        f"external:gpt#{n}",
        "https://api.example.com",
        upstream_model="gpt-4o-mini",
        authorization=f"Bearer sk-{n}",
        weight=weight,
        external=True,
    )


def test_outside_keys_share_traffic_by_their_weights():
    import random

    rnd = random.Random(3)
    k1, k2 = key(1, weight=1), key(2, weight=3)
    r = Router(lambda m: [k1, k2], clock=FakeClock(), rng=rnd.random)
    firsts = Counter(r.candidates("gpt")[0] for _ in range(4000))
    assert 0.2 < firsts[k1] / 4000 < 0.3
    sessions = Counter(r.candidates("gpt", session=f"s{i}")[0] for i in range(4000))
    assert 0.2 < sessions[k1] / 4000 < 0.3
    assert r.candidates("gpt", session="s1")[0] == r.candidates("gpt", session="s1")[0]


def test_an_outside_key_answering_429_or_401_is_passed_over_at_once_and_401s_are_counted():
    k1, k2 = key(1), key(2)
    r = Router(lambda m: [k1, k2], clock=FakeClock())
    assert r.failed(k1, 429) > 0
    assert r.candidates("gpt") == [k2]
    assert r.failed(k2, 401) > 0
    assert r.key_refusals == {"external:gpt#2": 1}
    # A replica's 429 is one failure among the three it takes.
    assert r.failed(A, 429) == 0


def test_a_targets_key_never_shows_in_its_repr():
    assert "sk-1" not in repr(key(1)) and "external:gpt#1" in repr(key(1))
