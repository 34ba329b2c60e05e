"""The reconciler's rule for on-demand models: start when asked, keep while used, give back when idle."""

from __future__ import annotations

from datetime import timedelta

from gatewayd.controller.ondemand import OnDemand
from gatewayd.controller.replica import Replica
from gatewayd.controller.scaler import Load, Scaler
from llmgw.catalog import Model
from llmgw.scaling import OnDemandConfig

CFG = OnDemandConfig(evict_after_idle_s=60, min_lifetime_s=300)
MODEL = Model(name="chat", source="/m.gguf", replicas_min=0, replicas_max=2)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


class Seen:
    def __init__(self) -> None:
        self.holding: dict[str, int] = {}
        self.at: float | None = None

    def last_asked(self, model: str) -> float | None:
        return self.at

    def waiting(self, model: str) -> int:
        return self.holding.get(model, 0)


def _rule():
    clock = Clock()
    rule = OnDemand(clock)
    rule.demand = seen = Seen()
    return rule, seen, clock, Scaler(clock=clock)


def _replica(age_s: float) -> Replica:
    r = Replica(replica_id="chat-1", model="chat")
    r.move("ready", "ready")
    r.history[0].at -= timedelta(seconds=age_s)
    return r


def test_a_held_request_starts_it_and_says_so():
    rule, seen, _clock, scaler = _rule()
    assert rule.low(MODEL, [], None, scaler, CFG) == 0
    seen.holding["chat"] = 2
    assert rule.low(MODEL, [], None, scaler, CFG) == 1
    assert scaler.target("chat") == 1
    assert scaler.reason("chat") == "started on demand: 2 requests waiting"


def test_idle_past_the_limit_gives_it_back_but_not_while_busy_or_young():
    rule, seen, clock, scaler = _rule()
    seen.at = clock.now
    rule.low(MODEL, [], None, scaler, CFG)
    assert scaler.target("chat") == 1
    clock.now += 61
    # Young: started 100 s ago, under min_lifetime_s.
    assert rule.low(MODEL, [_replica(100)], Load(), scaler, CFG) == 1
    # Old enough, but still answering something.
    assert rule.low(MODEL, [_replica(400)], Load(busy=1), scaler, CFG) == 1
    assert rule.low(MODEL, [_replica(400)], Load(), scaler, CFG) == 0
    assert scaler.target("chat") == 0
    assert scaler.reason("chat").startswith("stopped on demand: no request for 61 s")


def test_a_replica_found_at_start_gets_a_whole_idle_period():
    rule, _seen, clock, scaler = _rule()
    scaler.set("chat", 1, "found")
    clock.now += 30
    assert rule.low(MODEL, [_replica(400)], Load(), scaler, CFG) == 1
    clock.now += 31
    assert rule.low(MODEL, [_replica(400)], Load(), scaler, CFG) == 0
