"""Budgets and rate limits held across control planes sharing one store.

Each "control plane" here is what a gatewayd holds: its own store connection
(SQLite and a real PostgreSQL), its own ``SharedBudgetTable`` and
``SharedLimitTable`` and a ``CounterSync`` between them and the store.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from gatewayd.gateway.policy.cluster import CounterSync, SharedBudgetTable, SharedLimitTable
from gatewayd.gateway.policy.limits import Limits, LimitTable, Refusal, Ticket
from gatewayd.gateway.policy.pricing import BudgetSnapshot, BudgetTable
from gatewayd.store import Store, connect_store
from gatewayd.store.counter_records import SharedCounter
from llmgw.errors import StoreError

KEY = "key:k_1"
PROJECT = "project:Acme/ml/search"
ORG = "org:Acme"


class FakeClock:
    """Monotonic seconds that move only when a test says so (no bucket refills by itself)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Plane:
    """What one control plane holds of the shared limits."""

    store: Store
    budgets: SharedBudgetTable
    limits: SharedLimitTable
    sync: CounterSync


@pytest.fixture
async def planes(store_config, store_paths):
    opened: list[Store] = []

    async def make(
        name: str, *, clock=None, wall=time.time, interval_s: float = 0.05, snapshot=None
    ) -> Plane:
        store = await connect_store(store_config, store_paths)
        opened.append(store)
        budgets = SharedBudgetTable()
        if snapshot is not None:
            budgets.load(snapshot)
        limits = SharedLimitTable(clock or time.monotonic, wall=wall)
        sync = CounterSync(store, f"{name}/run", budgets, limits, interval_s=interval_s)
        await sync.start()
        return Plane(store, budgets, limits, sync)

    yield make
    for store in opened:
        await store.close()


def _month() -> str:
    return datetime.now(UTC).strftime("%Y-%m")


async def _wait(predicate, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("not met in time")


async def test_a_key_spent_through_one_control_plane_is_refused_through_the_other(planes):
    a, b = await planes("cp-a"), await planes("cp-b")
    chain = [(KEY, Limits(budget_month_micros=1_000)), (PROJECT, Limits()), (ORG, Limits())]
    runs = [asyncio.create_task(p.sync.run()) for p in (a, b)]
    try:
        assert b.budgets.check(chain) is None
        a.budgets.record(chain, 600)
        a.budgets.record(chain, 400)  # the answer that crosses the line is served
        refused_by_a = a.budgets.check(chain)
        assert refused_by_a is not None
        refused_by_b = await _wait(lambda: b.budgets.check(chain))
        # The same words and the same Retry-After rule (none for a month) as on A.
        assert refused_by_b == refused_by_a
        assert refused_by_b.retry_after_s is None and refused_by_b.limit == "budget_month"
        # B charged nothing itself: it is A's spend it counts.
        assert b.budgets.own_spent(KEY, _month()) == 0
        assert b.budgets.spent(ORG, _month()) == 1_000
    finally:
        for t in runs:
            t.cancel()
        await asyncio.gather(*runs, return_exceptions=True)


async def test_spend_on_both_control_planes_adds_up_once_on_each(planes):
    a, b = await planes("cp-a"), await planes("cp-b")
    chain = [(KEY, Limits()), (PROJECT, Limits())]
    for _ in range(3):
        a.budgets.record(chain, 100)
        b.budgets.record(chain, 10)
        # Rounds run again and again: a total read twice is counted once.
        for p in (a, b, a, b):
            await p.sync.step()
    month = _month()
    assert a.budgets.spent(PROJECT, month) == b.budgets.spent(PROJECT, month) == 330


async def test_a_restarted_control_plane_does_not_count_its_earlier_runs_spend_twice(planes):
    # Guards a restart counting a run's spend twice: once from the usage rows the
    # budgets are loaded from at start, once more from the run's shared totals.
    month = _month()
    first = await planes("cp-a")
    first.budgets.record([(KEY, Limits())], 700)
    await first.sync.step()
    from_usage = BudgetSnapshot(spent={KEY: {month: 700}})
    again = await planes("cp-a-again", snapshot=from_usage)
    await again.sync.step()
    assert again.budgets.spent(KEY, month) == 700
    # What the earlier run charges after this start is new, and counted.
    first.budgets.record([(KEY, Limits())], 50)
    await first.sync.step()
    await again.sync.step()
    assert again.budgets.spent(KEY, month) == 750


async def test_requests_through_two_control_planes_stay_within_the_limit_and_one_sync(planes):
    # Without sharing, each control plane let through its own 30 a minute: 60 together.
    clock = FakeClock()
    a, b = await planes("cp-a", clock=clock), await planes("cp-b", clock=clock)
    limit, per_sync = 30, 4
    chain = [(KEY, Limits(rpm=limit)), (PROJECT, Limits())]
    admitted = 0
    for _ in range(20):
        for p in (a, b):
            for _ in range(per_sync):
                admitted += isinstance(p.limits.admit(chain, 0), Ticket)
        # One sync interval: each writes what it took, then reads what the other took.
        for p in (a, b, a):
            await p.sync.step()
    # What slips: what the other let through within one sync interval, unseen.
    assert limit <= admitted <= limit + per_sync
    for p in (a, b):
        refusal = p.limits.admit(chain, 0)
        assert isinstance(refusal, Refusal) and refusal.limit == "rpm" and refusal.scope == KEY


async def test_tokens_an_answer_used_beyond_its_estimate_are_charged_on_the_other_too(planes):
    clock = FakeClock()
    a, b = await planes("cp-a", clock=clock), await planes("cp-b", clock=clock)
    chain = [(KEY, Limits(tpm=1_000))]
    ticket = a.limits.admit(chain, 100)
    ticket.settle(900)
    ticket.settle(900)  # settled once only, here and in what is shared
    for p in (a, b):
        await p.sync.step()
    refusal = b.limits.admit(chain, 200)
    assert isinstance(refusal, Refusal) and refusal.limit == "tpm"
    assert isinstance(b.limits.admit(chain, 100), Ticket)


async def test_an_estimate_an_answer_did_not_use_is_given_back_on_the_other_too(planes):
    clock = FakeClock()
    a, b = await planes("cp-a", clock=clock), await planes("cp-b", clock=clock)
    chain = [(KEY, Limits(tpm=1_000))]
    ticket = a.limits.admit(chain, 600)
    for p in (a, b):
        await p.sync.step()
    assert isinstance(b.limits.admit(chain, 500), Refusal)
    ticket.settle(0)  # the request failed before an answer
    for p in (a, b):
        await p.sync.step()
    assert isinstance(b.limits.admit(chain, 500), Ticket)


async def test_a_control_plane_started_later_counts_what_the_others_took_this_minute(planes):
    # Guards a control plane (re)started under load letting a whole fresh minute through.
    clock = FakeClock()
    half_past = lambda: 1_800_000_030.0  # 30 s into a minute window
    a = await planes("cp-a", clock=clock, wall=half_past)
    chain = [(KEY, Limits(rpm=600))]
    for _ in range(600):
        assert isinstance(a.limits.admit(chain, 0), Ticket)
    await a.sync.step()
    late = await planes("cp-late", clock=clock, wall=half_past)
    # 600 taken this minute, less the 300 that 600 a minute refilled in its first 30 s.
    left = sum(isinstance(late.limits.admit(chain, 0), Ticket) for _ in range(600))
    assert left == 300


async def test_one_control_plane_alone_limits_exactly_as_the_in_process_limiter(planes):
    # The shared limiter with its sync and no other control plane must refuse and
    # admit exactly where the plain in-process one does.
    clock = FakeClock()
    plain = LimitTable(clock)
    plane = await planes("cp-solo", clock=clock)
    shared, sync = plane.limits, plane.sync
    chains = [
        [(KEY, Limits(rpm=20, tpm=2_000)), (PROJECT, Limits(rpm=30)), (ORG, Limits(tpm=5_000))],
        [("key:k_2", Limits(rpm=5)), (PROJECT, Limits(rpm=30)), (ORG, Limits(tpm=5_000))],
    ]
    rng = random.Random(15)
    pending: list[tuple[Ticket, Ticket]] = []
    for i in range(400):
        chain = rng.choice(chains)
        est = rng.randrange(0, 400)
        got, want = shared.admit(chain, est), plain.admit(chain, est)
        assert isinstance(got, Refusal) == isinstance(want, Refusal), i
        if isinstance(want, Refusal):
            assert got == want, i
        else:
            pending.append((got, want))
        if pending and rng.random() < 0.5:
            got_t, want_t = pending.pop(rng.randrange(len(pending)))
            used = rng.randrange(0, 600)
            got_t.settle(used)
            want_t.settle(used)
        clock.now += rng.choice([0.0, 0.1, 0.5, 2.0])
        if i % 25 == 0:
            await sync.step()


def test_one_control_plane_alone_counts_budgets_exactly_as_the_in_process_table():
    clock = FakeClock(datetime(2026, 11, 30, 23, 59, tzinfo=UTC).timestamp())
    shared, plain = SharedBudgetTable(clock), BudgetTable(clock)
    chain = [(KEY, Limits(budget_day_micros=500)), (ORG, Limits(budget_month_micros=2_000))]
    for step in range(60):
        for table in (shared, plain):
            table.record(chain, 37)
        assert shared.check(chain) == plain.check(chain), step
        assert shared.snapshot() == plain.snapshot()
        clock.now += 7  # across midnight and the month's end
    assert shared.pending("cp/run")  # and its own totals are ready to share


class _FlakyStore:
    """The real store, which can be made to fail as a store that is down does."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = False

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if not name.endswith("counters"):
            return attr

        async def call(*args, **kwargs):
            if self.down:
                raise StoreError("the store is down (a test)")
            return await attr(*args, **kwargs)

        return call


async def test_totals_not_written_while_the_store_is_down_are_shared_once_it_is_back(planes):
    a, b = await planes("cp-a"), await planes("cp-b")
    flaky = _FlakyStore(a.store)
    a.sync.store = flaky
    chain = [(KEY, Limits())]
    month = _month()
    flaky.down = True
    a.budgets.record(chain, 250)
    with pytest.raises(StoreError):
        await a.sync.step()
    a.budgets.record(chain, 50)
    with pytest.raises(StoreError):
        await a.sync.step()
    flaky.down = False
    await a.sync.step()
    await b.sync.step()
    assert b.budgets.spent(KEY, month) == 300


async def test_a_row_of_a_past_period_is_not_counted(planes):
    b = await planes("cp-b")
    old = SharedCounter(
        "cp-a/run", KEY, "spend", "2020-01", 10**9, datetime.now(UTC).replace(year=2099)
    )
    await b.store.publish_counters([old])
    await b.sync.step()
    assert b.budgets.spent(KEY, "2020-01") == 0


async def test_a_writer_whose_clock_is_minutes_off_is_not_counted_twice(planes):
    # Guards forgetting a row by its window's name: a control plane whose clock runs
    # minutes behind names old windows, and its row, read again within the look back
    # after our minute turned, was counted afresh.
    clock, wall = FakeClock(), FakeClock(1_800_000_005.0)
    b = await planes("cp-b", clock=clock, wall=wall)
    behind = SharedCounter(
        "cp-late-clock/run", KEY, "rpm", f"m{int(wall() // 60) - 10}", 50,
        datetime.now(UTC).replace(year=2099), 600,
    )  # fmt: skip
    await b.store.publish_counters([behind])
    await b.sync.step()
    wall.now += 61  # our minute turns
    await b.sync.step()
    await b.store.publish_counters([behind])  # written again, the same total
    await b.sync.step()
    chain = [(KEY, Limits(rpm=600))]
    assert sum(isinstance(b.limits.admit(chain, 0), Ticket) for _ in range(600)) == 550


async def test_an_mcp_servers_rate_holds_across_control_planes_as_a_keys_limit_does(planes):
    # Guards each control plane keeping its own buckets: --rate 30 let 30 through each.
    from gatewayd.mcp.protect import RateBuckets

    clock = FakeClock()
    a, b = await planes("cp-a", clock=clock), await planes("cp-b", clock=clock)
    rates = []
    for p in (a, b):
        r = RateBuckets(clock)
        r.share(p.limits)
        rates.append(r)
    limit, per_sync = 30, 4
    admitted = 0
    for _ in range(20):
        for r in rates:
            for _ in range(per_sync):
                admitted += r.take("key_1", "hr", limit) == 0.0
        for p in (a, b, a):
            await p.sync.step()
    assert limit <= admitted <= limit + per_sync
    for r in rates:
        assert r.take("key_1", "hr", limit) > 0
        # Another key, and the same key at another server, have their own allowance.
        assert r.take("key_2", "hr", limit) == 0.0
        assert r.take("key_1", "wiki", limit) == 0.0
    # A server removed is forgotten: its buckets go, other servers' stay.
    rates[0].forget_server("hr")
    assert rates[0].take("key_1", "hr", limit) == 0.0
    assert rates[0].take("key_1", "wiki", limit) == 0.0
