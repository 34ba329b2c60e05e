"""The running totals control planes share, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gatewayd.store import Store
from gatewayd.store.counter_records import SharedCounter

LATER = datetime.now(UTC) + timedelta(days=2)


def _c(writer: str, amount: int, *, scope="key:k1", kind="spend", period="2026-11", **kw):
    return SharedCounter(writer, scope, kind, period, amount, kw.pop("expires_at", LATER), **kw)


def _seen(reading) -> dict:
    return {(c.writer, c.scope, c.kind, c.period): (c.amount, c.rate_per_min) for c in reading.rows}


async def test_a_writers_totals_are_read_by_the_others_and_not_by_itself(store: Store):
    await store.publish_counters(
        [_c("cp-a/1", 500), _c("cp-a/1", 7, kind="rpm", period="m100", rate_per_min=60)]
    )
    await store.publish_counters([_c("cp-b/1", 20, scope="project:Acme/ml/chat")])
    by_b = await store.read_counters(exclude_writer="cp-b/1")
    assert _seen(by_b) == {
        ("cp-a/1", "key:k1", "spend", "2026-11"): (500, 0),
        ("cp-a/1", "key:k1", "rpm", "m100"): (7, 60),
    }
    assert all(c.updated_at is not None and c.updated_at <= by_b.now for c in by_b.rows)
    everyone = await store.read_counters()
    assert len(everyone.rows) == 3


async def test_a_total_written_again_replaces_the_last_one_instead_of_adding_to_it(store: Store):
    # Guards a sync that wrote increments: a write retried after a timeout whose
    # first try had landed would have charged the scope twice.
    await store.publish_counters([_c("cp-a/1", 500)])
    await store.publish_counters([_c("cp-a/1", 800)])
    await store.publish_counters([_c("cp-a/1", 800)])
    assert _seen(await store.read_counters()) == {
        ("cp-a/1", "key:k1", "spend", "2026-11"): (800, 0)
    }


async def test_only_rows_changed_after_since_are_read_again(store: Store):
    await store.publish_counters([_c("cp-a/1", 1), _c("cp-a/1", 1, scope="key:k2")])
    first = await store.read_counters(exclude_writer="cp-b/1")
    assert len(first.rows) == 2
    nothing = await store.read_counters(since=first.now, exclude_writer="cp-b/1")
    assert nothing.rows == [] and nothing.now >= first.now
    await store.publish_counters([_c("cp-a/1", 9, scope="key:k2")])
    changed = await store.read_counters(since=first.now, exclude_writer="cp-b/1")
    assert _seen(changed) == {("cp-a/1", "key:k2", "spend", "2026-11"): (9, 0)}


async def test_rows_whose_period_is_over_are_pruned_and_the_others_kept(store: Store):
    past = datetime.now(UTC) - timedelta(seconds=1)
    await store.publish_counters(
        [_c("cp-a/1", 1, period="2026-10", expires_at=past), _c("cp-a/1", 2)]
    )
    assert await store.prune_counters() == 1
    assert _seen(await store.read_counters()) == {("cp-a/1", "key:k1", "spend", "2026-11"): (2, 0)}
    assert await store.prune_counters() == 0


async def test_a_negative_token_total_is_kept_as_written(store: Store):
    # Tokens taken net of refunds: a window whose answers used less than their
    # estimates ends below zero, and must not be clamped (the others would miss the refund).
    await store.publish_counters([_c("cp-a/1", -40, kind="tpm", period="m7", rate_per_min=1000)])
    assert _seen(await store.read_counters()) == {("cp-a/1", "key:k1", "tpm", "m7"): (-40, 1000)}
