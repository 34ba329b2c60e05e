"""The control planes as the store lists them: who leads, who stands by, who is gone,
and the failover list the leader gives agents."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gatewayd.cluster import LeaderLease, Members
from gatewayd.store import ControlPlaneRecord
from tests.gatewayd.cluster.fakes import Clock, FlakyStore

TTL_S = 10.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def flaky(tmp_path, clock):
    store = FlakyStore(tmp_path / "llmgw.db", clock)
    await store.open()
    yield store
    await store.close()


def _member(store, clock, cp_id: str) -> Members:
    lease = LeaderLease(store, cp_id, ttl_s=TTL_S, clock=clock)
    record = ControlPlaneRecord(
        control_plane_id=cp_id,
        hostname=f"{cp_id}.example",
        agent_address=f"{cp_id}.example:7070",
        http_url=f"https://{cp_id}.example:8080",
        version="0.1.0",
        started_at=datetime(2026, 3, 2, 8, 0, tzinfo=UTC),
    )
    return Members(store, record, lease)


async def _roles(members: Members) -> list[tuple[str, str]]:
    return [(v.control_plane_id, v.role) for v in await members.views()]


async def test_every_control_plane_is_listed_the_leader_first(flaky, clock):
    b, a, c = (_member(flaky, clock, cp) for cp in ("cp-b", "cp-a", "cp-c"))
    await b.lease.round()  # cp-b leads
    await a.lease.round()
    await c.lease.round()
    for m in (a, b, c):
        assert await m.write()
    for m in (a, b, c):
        assert await _roles(m) == [("cp-b", "leader"), ("cp-a", "standby"), ("cp-c", "standby")]
    leader = (await a.views())[0]
    assert leader.leader_since == b.lease.leader_since.isoformat(timespec="seconds")
    assert leader.agent_address == "cp-b.example:7070"
    assert leader.http_url == "https://cp-b.example:8080"
    assert leader.store_state == "ok" and leader.version == "0.1.0"
    assert leader.last_seen_at and leader.started_at == "2026-03-02T08:00:00+00:00"
    assert all(v.leader_since == "" for v in (await a.views())[1:])
    # The failover list agents get: the leader's address first.
    assert b.agent_addresses() == [
        "cp-b.example:7070",
        "cp-a.example:7070",
        "cp-c.example:7070",
    ]
    assert a.agent_addresses()[0] == "cp-b.example:7070"
    assert a.leader_agent_address() == b.leader_agent_address() == "cp-b.example:7070"
    assert {r.control_plane_id for r in a.rows} == {"cp-a", "cp-b", "cp-c"}


async def test_a_control_plane_that_stopped_or_went_silent_is_gone_and_off_the_failover_list(
    flaky, clock
):
    a, b, c = (_member(flaky, clock, cp) for cp in ("cp-a", "cp-b", "cp-c"))
    await a.lease.round()
    for m in (a, b, c):
        await m.write()
    await b.stopped()  # a clean stop
    assert not await b.write()  # and no write after it
    clock.advance(TTL_S / 2)
    await a.lease.round()
    await a.write()
    await c.write()
    assert await _roles(a) == [("cp-a", "leader"), ("cp-c", "standby"), ("cp-b", "gone")]
    # cp-c falls silent (killed) for longer than the lease.
    clock.advance(TTL_S + 1)
    await a.lease.round()
    await a.write()
    assert await _roles(a) == [("cp-a", "leader"), ("cp-b", "gone"), ("cp-c", "gone")]
    assert a.agent_addresses() == ["cp-a.example:7070"]

    # Started again, it writes itself again and stands by.
    b2 = _member(flaky, clock, "cp-b")
    await b2.write()
    assert await _roles(a) == [("cp-a", "leader"), ("cp-b", "standby"), ("cp-c", "gone")]


async def test_views_answer_from_the_last_read_while_the_store_is_out(flaky, clock):
    a, b = _member(flaky, clock, "cp-a"), _member(flaky, clock, "cp-b")
    await a.lease.round()
    await b.lease.round()
    await a.write()
    await b.write()
    flaky.down = True
    await b.lease.round()
    assert not await b.write()
    views = await b.views()
    assert [(v.control_plane_id, v.role) for v in views] == [
        ("cp-a", "leader"),
        ("cp-b", "standby"),
    ]
    # Its own row says what it sees now: the store refuses it.
    assert "connection refused" in views[1].store_state
    assert b.agent_addresses() == ["cp-a.example:7070", "cp-b.example:7070"]


async def test_a_control_plane_lists_itself_before_its_first_write(flaky, clock):
    a = _member(flaky, clock, "cp-a")
    assert a.agent_addresses() == ["cp-a.example:7070"]
    assert a.leader_agent_address() == ""
    await a.lease.round()
    assert await _roles(a) == [("cp-a", "leader")]
    assert a.leader_agent_address() == "cp-a.example:7070"
