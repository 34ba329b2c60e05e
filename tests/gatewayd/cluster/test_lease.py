"""The leader lease's rules: never two leaders acting at once, stepping down in time,
and leaving the lease to its holder after a store outage.

Most tests run on a clock of their own (the leases' monotonic clock and the
store's UTC clock move together, as on one machine) over a real SQLite store
that can be cut or hung; the loop's own timing is checked in real time with
short leases.
"""

from __future__ import annotations

import asyncio

import pytest

from gatewayd.cluster import LeaderLease
from llmgw.errors import ConfigError
from tests.gatewayd.cluster.fakes import Clock, FlakyStore, RealClock

TTL_S = 10.0
STEP_S = 0.25


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def flaky(tmp_path, clock):
    store = FlakyStore(tmp_path / "llmgw.db", clock)
    await store.open()
    yield store
    await store.close()


@pytest.fixture
async def real_store(tmp_path):
    store = FlakyStore(tmp_path / "llmgw.db", RealClock())
    await store.open()
    yield store
    await store.close()


class Machines:
    """Control planes sharing one store and one machine's clock, stepped by the test.

    Each lease runs its round when its loop would wake; a frozen one (SIGSTOP)
    runs nothing. After every step, at most one lease may say it leads.
    """

    def __init__(self, clock: Clock, *leases: LeaderLease):
        self.clock = clock
        self.leases = leases
        self.frozen: set[str] = set()
        self.due = {lease.holder: clock() for lease in leases}
        self.changes: dict[str, list[bool]] = {lease.holder: [] for lease in leases}
        for lease in leases:
            lease.on_change(self.changes[lease.holder].append)

    async def step(self, seconds: float = STEP_S) -> list[str]:
        self.clock.advance(seconds)
        for lease in self.leases:
            if lease.holder in self.frozen or self.clock() < self.due[lease.holder]:
                continue
            await lease.round()
            self.due[lease.holder] = self.clock() + lease.next_round_in_s()
        leading = [lease.holder for lease in self.leases if lease.held()]
        assert len(leading) <= 1, f"{leading} act as leader at the same instant"
        return leading

    async def run_for(self, seconds: float) -> list[list[str]]:
        return [await self.step() for _ in range(round(seconds / STEP_S))]


def _lease(store, holder: str, clock, **kw) -> LeaderLease:
    return LeaderLease(store, holder, ttl_s=kw.pop("ttl_s", TTL_S), clock=clock, **kw)


async def test_the_first_control_plane_to_claim_leads_and_the_others_stand_by(flaky, clock):
    a, b = _lease(flaky, "a", clock), _lease(flaky, "b", clock)
    await a.round()
    await b.round()
    assert a.held() and not b.held()
    assert a.leading_event.is_set() and not b.leading_event.is_set()
    assert (a.leader_id, b.leader_id) == ("a", "a")
    assert a.epoch == b.epoch == 1
    assert a.leader_since == b.leader_since == a.state.acquired_at
    assert a.store_state == b.store_state == "ok"


async def test_at_most_one_of_three_acts_at_any_step_even_with_its_leader_frozen(flaky, clock):
    a, b, c = (_lease(flaky, h, clock) for h in "abc")
    machines = Machines(clock, a, b, c)
    # A steady minute: "a" renews every ttl/4 and keeps the lease; no change of holder.
    assert all(step == ["a"] for step in await machines.run_for(60))
    assert a.epoch == 1 and len(await flaky.leader_changes("leader")) == 1

    # SIGSTOP "a" for 30 s. Its last renewal was sent at most ttl/4 ago.
    last_renewal_sent = a._last_renewed_sent
    frozen_at = clock()
    machines.frozen.add("a")
    took_over_at = None
    while clock() - frozen_at < 30:
        leading = await machines.step()
        if leading and leading != ["a"] and took_over_at is None:
            took_over_at = clock()
    new = b if b.held() else c
    assert new.held() and took_over_at is not None
    # Taken within the lease plus one standby's try after a's last renewal.
    assert took_over_at - last_renewal_sent <= TTL_S + new.try_every_s + STEP_S

    # SIGCONT: before any of its tasks runs, "a" already knows it may not act.
    machines.frozen.discard("a")
    assert not a.held()
    await a.round()
    assert not a.held() and a.leader_id == new.holder and a.epoch == 2
    assert machines.changes["a"] == [True, False]
    assert all(step == [new.holder] for step in await machines.run_for(20))
    newest = (await flaky.leader_changes("leader"))[0]
    assert (newest.epoch, newest.holder, newest.previous_holder, newest.reason) == (
        2,
        new.holder,
        "a",
        "expired",
    )


async def test_a_leader_that_cannot_renew_stops_acting_before_its_lease_ends(flaky, clock):
    a, b = _lease(flaky, "a", clock), _lease(flaky, "b", clock)
    machines = Machines(clock, a, b)
    await machines.run_for(5)
    expires_at = a.state.expires_at  # the store's end of a's lease, at its last renewal
    last_sent = a._last_renewed_sent

    flaky.down = True
    while a.held():
        await machines.step()
    # It stopped at last renewal + ttl - margin, while the store still gave it the lease.
    assert clock() - last_sent == pytest.approx(TTL_S - a.margin_s, abs=STEP_S)
    assert clock.utc() < expires_at
    assert machines.changes["a"] == [True, False]
    assert "connection refused" in a.store_state and "connection refused" in b.store_state
    # Nobody leads while the store is out.
    assert all(step == [] for step in await machines.run_for(20))


async def test_a_renewal_answered_late_counts_from_when_it_was_sent(flaky, clock):
    # Guards a leader frozen between sending its renewal and reading the answer:
    # counted from the answer, it would act for a whole lease after it resumed.
    a = _lease(flaky, "a", clock)
    changes: list[bool] = []
    a.on_change(changes.append)
    await a.round()
    flaky.answer_late_s = TTL_S - a.margin_s
    sent = clock()
    await a.round()
    assert a.state.held_by("a")  # the store renewed it…
    assert clock() == sent + TTL_S - a.margin_s
    assert not a.held() and changes == [True, False]  # …but the time to act had run out


async def test_a_leader_whose_renewal_is_refused_steps_down_at_once(flaky, clock):
    a = _lease(flaky, "a", clock)
    changes: list[bool] = []
    a.on_change(changes.append)
    await a.round()
    # Another control plane holds the lease now (here: handed over behind a's back).
    assert await flaky.release_lease("leader", "a")
    assert (await flaky.claim_lease("leader", "b", TTL_S)).held_by("b")
    assert a.held()  # its own deadline is still ahead
    await a.round()
    assert not a.held() and changes == [True, False]
    assert a.leader_id == "b" and a.epoch == 2


async def test_a_standby_that_lost_the_store_leaves_the_lease_to_its_leader_for_a_round(
    flaky, clock
):
    # Guards the reference's failure: while the store's primary was replaced
    # (a Patroni promotion), the lease lapsed for everyone and a standby took it
    # the moment the store came back, moving leadership for nothing.
    a, b = _lease(flaky, "a", clock), _lease(flaky, "b", clock)
    machines = Machines(clock, a, b)
    await machines.run_for(5)
    flaky.down = True
    await machines.run_for(30)  # longer than the lease: it lapses in the store too
    flaky.down = False

    await b.round()  # the standby sees the store first, and only looks
    assert not b.held()
    clock.advance(b.hold_off_s / 2)
    await b.round()
    assert not b.held()
    await a.round()  # the leader of record claims at once and leads again
    assert a.held() and a.epoch == 2
    clock.advance(b.hold_off_s)
    await b.round()
    assert not b.held() and b.leader_id == "a"
    assert [c.holder for c in await flaky.leader_changes("leader")] == ["a", "a"]


async def test_after_an_outage_a_standby_takes_a_lease_nobody_came_back_for(flaky, clock):
    a, b = _lease(flaky, "a", clock), _lease(flaky, "b", clock)
    machines = Machines(clock, a, b)
    await machines.run_for(5)
    machines.frozen.add("a")  # the leader is gone for good
    flaky.down = True
    await machines.run_for(30)
    flaky.down = False
    await machines.step()  # b looks
    assert not b.held()
    await machines.run_for(b.hold_off_s + b.try_every_s + STEP_S)
    assert b.held() and b.epoch == 2


async def test_a_store_call_that_hangs_is_given_up_when_the_lease_would_end(real_store):
    # Guards a leader kept acting by a renewal that never returns (a store
    # that accepted the connection and went silent).
    a = LeaderLease(real_store, "a", ttl_s=1.0, try_every_s=0.1)
    changes: asyncio.Queue[bool] = asyncio.Queue()
    a.on_change(changes.put_nowait)
    loop = asyncio.create_task(a.run())
    try:
        assert await asyncio.wait_for(changes.get(), 10) is True
        real_store.hang = asyncio.Event()
        # The loss is reported while the renewal is still hung: the loop gave it up.
        assert await asyncio.wait_for(changes.get(), 10) is False
        assert not real_store.hang.is_set() and real_store.given_up >= 1
        assert not a.held() and "did not answer" in a.store_state
        real_store.hang.set()
        real_store.hang = None
        # The store answers again: the holder of record takes the lease back at once.
        assert await asyncio.wait_for(changes.get(), 10) is True
        assert a.store_state == "ok"
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert not a.held()  # a cancelled loop stops acting


async def test_a_released_lease_is_taken_by_a_standby_long_before_it_would_lapse(real_store):
    # 120 s: were the release lost, the standby could not lead within the wait below.
    a = LeaderLease(real_store, "a", ttl_s=120.0, try_every_s=0.1)
    b = LeaderLease(real_store, "b", ttl_s=120.0, try_every_s=0.1)
    loops = [asyncio.create_task(a.run())]
    try:
        assert await a.wait_leading(10)
        loops.append(asyncio.create_task(b.run()))
        for _ in range(500):
            if b.leader_id == "a":
                break
            await asyncio.sleep(0.02)
        assert b.leader_id == "a" and not b.held()
        assert await a.release()
        assert not a.held()
        assert await b.wait_leading(30)
        assert b.epoch == 2
        reasons = [(c.holder, c.reason) for c in await real_store.leader_changes("leader")]
        assert reasons == [("b", "acquired"), ("", "released"), ("a", "acquired")]
        # A released lease is not claimed again by its loop.
        await asyncio.wait_for(loops[0], 10)
        assert not a.held()
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)


@pytest.mark.parametrize(
    "kw",
    [{"ttl_s": 0}, {"ttl_s": 10, "margin_s": 10}, {"ttl_s": 10, "renew_every_s": 8}],
)
def test_a_lease_that_could_not_be_renewed_in_time_is_refused_at_once(kw, clock):
    with pytest.raises(ConfigError):
        LeaderLease(None, "a", clock=clock, **kw)
