"""The gateway's side of on-demand models: requests counted, shared, and held until a replica is ready."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.routing.demand import DEMAND, Demand
from gatewayd.nodes.watch import Broadcaster
from gatewayd.store.counter_records import SharedCounter


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _demand(state: dict, watch=None, clock=None) -> Demand:
    return Demand(
        on_demand=lambda m: m in state["on_demand"],
        ready=lambda m: m in state["ready"],
        refused=lambda m: state["refused"].get(m),
        wake=lambda m: state["woken"].append(m),
        watch=watch,
        clock=clock or Clock(),
    )


def _state(**kw) -> dict:
    return {"on_demand": {"chat"}, "ready": set(), "refused": {}, "woken": []} | kw


async def test_a_held_request_goes_on_when_a_replica_becomes_ready():
    watch = Broadcaster()
    state = _state()
    demand = _demand(state, watch)
    assert demand.asked("chat")
    held = asyncio.create_task(demand.hold("chat", 30))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert state["woken"] == ["chat"] and demand.holding == {"chat": 1}
    state["ready"].add("chat")
    watch.publish("replicas", "chat-abc123")
    await asyncio.wait_for(held, 5)
    assert demand.holding == {}
    await demand.close()


async def test_a_model_that_cannot_be_placed_is_refused_with_the_reason():
    state = _state(refused={"chat": "no node can run it: 1 without a suitable GPU"})
    demand = _demand(state)
    with pytest.raises(ApiError) as err:
        await demand.hold("chat", 30)
    assert err.value.status == 503 and err.value.retry_after_s == 15
    assert "without a suitable GPU" in err.value.message


async def test_a_replica_not_ready_within_the_queue_ttl_is_a_503_saying_so():
    demand = Demand(on_demand=lambda m: True, ready=lambda m: False, refused=lambda m: None)
    with pytest.raises(ApiError) as err:
        await demand.hold("chat", 0.05)
    assert err.value.code == "no_replica_ready" and "within 0.05 s" in err.value.message


def test_only_on_demand_models_are_counted_and_counts_travel_as_rows():
    clock = Clock()
    demand = _demand(_state(), clock=clock)
    assert not demand.asked("other")
    demand.asked("chat")
    demand.asked("chat")
    (row,) = demand.pending("cp-a/1")
    assert (row.kind, row.scope, row.amount) == (DEMAND, "chat", 2)
    assert demand.pending("cp-a/1") == []  # nothing new
    demand.unsent([row])
    assert [r.amount for r in demand.pending("cp-a/1")] == [2]


def test_another_planes_growing_count_means_the_model_was_asked_for_now():
    clock = Clock()
    demand = _demand(_state(), clock=clock)
    far = datetime(2030, 1, 1, tzinfo=UTC)
    demand.absorb([SharedCounter("cp-b/1", "chat", DEMAND, "run", 5, far)], first=True)
    assert demand.last_asked("chat") is None  # what it had before we looked is no news
    clock.now = 150.0
    demand.absorb([SharedCounter("cp-b/1", "chat", DEMAND, "run", 5, far)])
    assert demand.last_asked("chat") is None
    demand.absorb([SharedCounter("cp-b/1", "chat", DEMAND, "run", 6, far)])
    assert demand.last_asked("chat") == 150.0
    # Budget rows are not demand.
    demand.absorb([SharedCounter("cp-b/1", "other", "spend", "2030-01", 9, far)])
    assert demand.last_asked("other") is None


def _through_the_store(rows: list[SharedCounter]) -> list[SharedCounter]:
    """The rows as another control plane reads them back: stamped with the store's clock."""
    now = datetime.now(UTC)
    return [
        SharedCounter(r.writer, r.scope, r.kind, r.period, r.amount, r.expires_at, 0, now)
        for r in rows
    ]


async def test_a_request_held_on_a_standby_keeps_its_model_wanted_on_the_leader():
    # Guards the leader knowing only of requests asked: with evict_after_idle_s shorter
    # than a reconcile pass, a request held on a standby never got its replica started
    # (the fault suite's on-demand row: 503 no_replica_ready after the queue_ttl).
    standby_state, leader_state = _state(), _state()
    clock = Clock()
    standby, leader = _demand(standby_state), _demand(leader_state, clock=clock)
    standby.asked("chat")
    held = asyncio.create_task(standby.hold("chat", 30))
    await asyncio.sleep(0)
    leader.absorb(_through_the_store(standby.pending("cp-b/1")))
    assert leader.waiting("chat") == 1
    # The leader's reconciler is asked to look at once, not at its next tick.
    assert set(leader_state["woken"]) == {"chat"}
    # Said again every round while held: still waiting long after the ask.
    for _ in range(10):
        clock.now += 1.0
        leader.absorb(_through_the_store(standby.pending("cp-b/1")))
        assert leader.waiting("chat") == 1
    standby_state["ready"].add("chat")
    standby.notice()
    await asyncio.wait_for(held, 5)
    # No longer held: said once as 0, then nothing.
    rows = standby.pending("cp-b/1")
    assert [(r.period, r.amount) for r in rows] == [("held", 0)]
    leader.absorb(_through_the_store(rows))
    assert leader.waiting("chat") == 0
    assert standby.pending("cp-b/1") == []
    await standby.close()


def test_held_requests_of_a_control_plane_that_stopped_saying_them_are_forgotten():
    clock = Clock()
    leader = _demand(_state(), clock=clock)
    far = datetime(2030, 1, 1, tzinfo=UTC)
    now = datetime.now(UTC)
    leader.absorb([SharedCounter("cp-b/1", "chat", DEMAND, "held", 2, far, 0, now)])
    assert leader.waiting("chat") == 2
    clock.now += 6.0  # past HELD_FRESH_S with no word from cp-b
    assert leader.waiting("chat") == 0
    # A row written long ago (its writer died) is not counted at all.
    old = datetime(2020, 1, 1, tzinfo=UTC)
    leader.absorb([SharedCounter("cp-c/1", "chat", DEMAND, "held", 3, far, 0, old)], first=True)
    assert leader.waiting("chat") == 0
