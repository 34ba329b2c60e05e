"""The leader lease and the control planes in the store, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from gatewayd.store import ControlPlaneRecord, Store

TTL_S = 10.0


async def _lapsed(store: Store, name: str = "leader") -> None:
    """Wait, by the store's clock, until the lease has run out."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = await store.get_lease(name)
        if state is not None and not state.active_holder:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the lease never ran out")


async def test_a_free_lease_goes_to_the_first_claimant_with_epoch_one(store: Store):
    assert await store.get_lease("leader") is None
    state = await store.claim_lease("leader", "cp-a", TTL_S)
    assert state.held_by("cp-a") and state.active_holder == "cp-a"
    assert state.epoch == 1
    assert state.acquired_at == state.renewed_at
    assert state.acquired_at <= state.now
    assert state.expires_at - state.acquired_at == timedelta(seconds=TTL_S)
    (change,) = await store.leader_changes("leader")
    assert (change.epoch, change.holder, change.previous_holder, change.reason) == (
        1,
        "cp-a",
        "",
        "acquired",
    )
    assert change.vacant_s is None  # never held before: nothing to measure
    read = await store.get_lease("leader")
    assert read.model_dump(exclude={"now"}) == state.model_dump(exclude={"now"})
    assert read.now >= state.now


async def test_a_held_lease_is_refused_to_another_and_left_as_it_was(store: Store):
    held = await store.claim_lease("leader", "cp-a", TTL_S)
    refused = await store.claim_lease("leader", "cp-b", TTL_S)
    assert not refused.held_by("cp-b")
    assert refused.active_holder == "cp-a"
    assert (refused.epoch, refused.expires_at) == (held.epoch, held.expires_at)
    assert len(await store.leader_changes("leader")) == 1


async def test_a_renewal_keeps_the_epoch_and_pushes_the_expiry_on(store: Store):
    first = await store.claim_lease("leader", "cp-a", TTL_S)
    again = await store.claim_lease("leader", "cp-a", TTL_S)
    assert again.held_by("cp-a")
    assert again.epoch == first.epoch
    assert again.acquired_at == first.acquired_at
    assert again.expires_at >= first.expires_at
    assert again.renewed_at >= first.renewed_at
    # A renewal is not a change of holder.
    assert len(await store.leader_changes("leader")) == 1


async def test_a_lapsed_lease_goes_to_another_with_the_next_epoch(store: Store):
    first = await store.claim_lease("leader", "cp-a", 0.05)
    await _lapsed(store)
    taken = await store.claim_lease("leader", "cp-b", TTL_S)
    assert taken.held_by("cp-b")
    assert taken.epoch == first.epoch + 1
    assert taken.acquired_at > first.acquired_at
    newest, oldest = await store.leader_changes("leader")
    assert oldest.holder == "cp-a"
    assert (newest.epoch, newest.holder, newest.previous_holder, newest.reason) == (
        2,
        "cp-b",
        "cp-a",
        "expired",
    )
    assert newest.vacant_s is not None and newest.vacant_s >= 0
    # The old holder's renewal now comes too late: refused, nothing changes.
    late = await store.claim_lease("leader", "cp-a", TTL_S)
    assert late.active_holder == "cp-b" and late.epoch == 2


async def test_a_holder_that_lapsed_and_claims_again_gets_a_new_epoch(store: Store):
    # Guards a leader that stopped acting when its lease lapsed (a store outage)
    # taking it back under the same epoch, as if it had led throughout.
    await store.claim_lease("leader", "cp-a", 0.05)
    await _lapsed(store)
    again = await store.claim_lease("leader", "cp-a", TTL_S)
    assert again.held_by("cp-a") and again.epoch == 2
    assert (await store.leader_changes("leader"))[0].reason == "expired"


async def test_a_released_lease_is_free_at_once_and_only_its_holder_may_release_it(
    store: Store,
):
    await store.claim_lease("leader", "cp-a", TTL_S)
    assert not await store.release_lease("leader", "cp-b")
    assert (await store.get_lease("leader")).active_holder == "cp-a"
    assert await store.release_lease("leader", "cp-a")
    state = await store.get_lease("leader")
    assert state.active_holder == "" and state.released
    assert not await store.release_lease("leader", "cp-a")  # nothing left to give up
    taken = await store.claim_lease("leader", "cp-b", TTL_S)
    assert taken.held_by("cp-b") and taken.epoch == 2 and not taken.released
    acquired, released, _ = await store.leader_changes("leader")
    assert (released.holder, released.previous_holder, released.reason) == ("", "cp-a", "released")
    assert released.epoch == 1
    assert (acquired.holder, acquired.previous_holder, acquired.reason) == (
        "cp-b",
        "cp-a",
        "acquired",
    )
    assert acquired.vacant_s is not None and acquired.vacant_s >= 0


async def test_claims_racing_for_a_free_lease_give_it_to_exactly_one(store: Store):
    # On PostgreSQL these run on several pooled connections at once.
    states = await asyncio.gather(
        *(store.claim_lease("leader", f"cp-{i}", TTL_S) for i in range(8))
    )
    winners = [s for i, s in enumerate(states) if s.held_by(f"cp-{i}")]
    assert len(winners) == 1
    assert {s.active_holder for s in states} == {winners[0].holder}
    assert len(await store.leader_changes("leader")) == 1


async def test_leases_of_different_names_are_apart_and_changes_come_newest_first(store: Store):
    await store.claim_lease("leader", "cp-a", TTL_S)
    await store.claim_lease("batches", "cp-b", TTL_S)
    assert (await store.get_lease("leader")).active_holder == "cp-a"
    assert (await store.get_lease("batches")).active_holder == "cp-b"
    for _ in range(3):
        await store.release_lease("leader", "cp-a")
        await store.claim_lease("leader", "cp-a", TTL_S)
    changes = await store.leader_changes("leader")
    assert [c.epoch for c in changes] == [4, 3, 3, 2, 2, 1, 1]
    assert [c.epoch for c in await store.leader_changes("leader", limit=2)] == [4, 3]
    assert [c.holder for c in await store.leader_changes("batches")] == ["cp-b"]


def _cp(cp_id: str, **fields) -> ControlPlaneRecord:
    defaults = {
        "hostname": f"{cp_id}.example",
        "agent_address": f"{cp_id}.example:7070",
        "http_url": f"https://{cp_id}.example:8080",
        "admin_listen": "127.0.0.1:9090",
        "version": "0.1.0",
        "started_at": datetime(2026, 1, 5, 8, 0, tzinfo=UTC),
        "store_state": "ok",
    }
    return ControlPlaneRecord(control_plane_id=cp_id, **{**defaults, **fields})


async def test_control_planes_are_upserted_listed_and_marked_stopped(store: Store):
    before = await store.store_clock()
    await store.put_control_plane(_cp("cp-b"))
    await store.put_control_plane(_cp("cp-a", store_state="could not reach PostgreSQL"))
    listed = await store.list_control_planes()
    assert [c.control_plane_id for c in listed] == ["cp-a", "cp-b"]
    a, b = listed
    assert a.store_state == "could not reach PostgreSQL"
    assert b.agent_address == "cp-b.example:7070" and b.http_url == "https://cp-b.example:8080"
    assert b.started_at == datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
    # last_seen_at is the store's clock, whatever the caller passed.
    assert a.last_seen_at >= before and b.stopped_at is None

    await store.mark_control_plane_stopped("cp-b")
    b = (await store.list_control_planes())[1]
    assert b.stopped_at is not None and b.stopped_at >= b.last_seen_at

    # Writing itself again (a restart) clears the stop and takes the new fields.
    await store.put_control_plane(_cp("cp-b", version="0.2.0"))
    b = (await store.list_control_planes())[1]
    assert b.stopped_at is None and b.version == "0.2.0"

    assert await store.delete_control_plane("cp-a")
    assert not await store.delete_control_plane("cp-a")
    assert [c.control_plane_id for c in await store.list_control_planes()] == ["cp-b"]
