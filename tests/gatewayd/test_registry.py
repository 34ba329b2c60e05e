"""The node registry: liveness, reasons, overlays and batched heartbeat writes."""

from __future__ import annotations

import pytest

from gatewayd.nodes.registry import NodeRegistry
from gatewayd.store import SqliteStore
from proto.llmgw.v1 import Heartbeat, HostFacts, Register


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingStore(SqliteStore):
    """A real SQLite store that also counts heartbeat writes."""

    heartbeat_writes = 0

    async def record_heartbeats(self, rows):
        self.heartbeat_writes += 1
        await super().record_heartbeats(rows)


@pytest.fixture
async def store(tmp_path):
    s = CountingStore(tmp_path / "s.db")
    await s.open()
    yield s
    await s.close()


def register(node_id: str) -> Register:
    return Register(node_id=node_id, hostname=node_id, host=HostFacts(arch="x86_64"))


async def test_a_node_that_misses_heartbeats_for_the_grace_becomes_not_ready_with_the_reason(store):
    clock = Clock()
    reg = NodeRegistry(store, not_ready_grace_s=15, clock=clock)
    session = await reg.register(register("n1"), address="10.0.0.1")
    clock.now += 14
    await reg.check_liveness()
    assert reg.view("n1").state == "ready"
    clock.now += 1
    await reg.check_liveness()
    view = reg.view("n1")
    assert view.state == "not_ready"
    assert view.reason == "no heartbeat for 15 s (grace 15 s)"
    # ...and is ready again when it beats, saying where it had been.
    await reg.heartbeat("n1", session, Heartbeat(seq=2))
    view = reg.view("n1")
    assert view.state == "ready" and view.reason.startswith("back after")
    assert "no heartbeat" in view.reason
    assert (await store.get_node("n1")).state == "ready"


async def test_heartbeats_are_written_in_one_batch_not_one_write_per_beat(store):
    clock = Clock()
    reg = NodeRegistry(store, not_ready_grace_s=15, clock=clock)
    sessions = {n: await reg.register(register(n), address="") for n in ("a", "b", "c")}
    for seq in range(1, 11):
        for n, s in sessions.items():
            await reg.heartbeat(n, s, Heartbeat(seq=seq))
    assert store.heartbeat_writes == 0
    assert await reg.flush() == 3
    assert store.heartbeat_writes == 1
    assert (await store.get_node("b")).heartbeat_seq == 10
    # Nothing new: nothing written.
    assert await reg.flush() == 0
    assert store.heartbeat_writes == 1


async def test_a_heartbeat_from_a_superseded_stream_is_ignored(store):
    reg = NodeRegistry(store, not_ready_grace_s=15, clock=Clock())
    old = await reg.register(register("n"), address="")
    new = await reg.register(register("n"), address="")
    await reg.heartbeat("n", old, Heartbeat(seq=99))
    assert reg.view("n").heartbeat_seq == 0
    await reg.disconnected("n", old, "cut")
    assert reg.view("n").state == "ready"  # the old stream's end says nothing of the new one
    await reg.heartbeat("n", new, Heartbeat(seq=5))
    assert reg.view("n").heartbeat_seq == 5


async def test_a_cordoned_node_stays_cordoned_when_it_registers_again(store):
    reg = NodeRegistry(store, not_ready_grace_s=15, clock=Clock())
    await reg.register(register("n"), address="")
    assert (await reg.set_cordoned("n", True)).cordoned
    await reg.register(register("n"), address="")
    assert reg.view("n").cordoned
    assert await reg.set_cordoned("ghost", True) is None


async def test_watchers_hear_of_state_changes(store):
    clock = Clock()
    reg = NodeRegistry(store, not_ready_grace_s=1, clock=clock)
    sub = reg.watch.subscribe(["nodes"])
    await reg.register(register("w"), address="")
    clock.now += 5
    await reg.check_liveness()
    changes = sub.changes()
    assert await anext(changes) == ("nodes", "w")
    reg.watch.unsubscribe(sub)


async def test_a_nodes_measured_memory_bandwidth_is_kept_from_its_heartbeats(store):
    # CPU speed estimates read it from the host facts placement and plans see.
    from gatewayd.controller.candidates import live_inventory

    reg = NodeRegistry(store, not_ready_grace_s=15)
    session = await reg.register(register("n1"), address="10.0.0.1")
    assert reg.view("n1").host.mem_bandwidth_gbs == 0
    await reg.heartbeat("n1", session, Heartbeat(seq=1, mem_bandwidth_gbs=41.9))
    assert reg.view("n1").host.mem_bandwidth_gbs == 41.9
    assert live_inventory(reg.live("n1")).host.mem_bandwidth_gbs == 41.9
    # A heartbeat without a figure leaves the last one, and so does a new registration.
    await reg.heartbeat("n1", session, Heartbeat(seq=2))
    assert reg.view("n1").host.mem_bandwidth_gbs == 41.9
    await reg.register(register("n1"), address="10.0.0.1")
    assert reg.view("n1").host.mem_bandwidth_gbs == 41.9
