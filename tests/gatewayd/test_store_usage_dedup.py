"""A usage row stored once per row id, on SQLite and on a real PostgreSQL alike.

The usage journal replays what a crashed control plane left, some of which the
store may have committed just before the crash: those rows, and their sums,
must not be counted twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gatewayd.gateway.metering.usage import UsageRow
from gatewayd.store import Store

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def _row(i: int, row_id: str = "") -> UsageRow:
    return UsageRow(
        at=T0 + timedelta(seconds=i), key_id="key_a", project="Acme/ml/search", model="chat",
        prompt_tokens=10, completion_tokens=5, cost_micros=100, status=200, row_id=row_id,
    )  # fmt: skip


async def _totals(store: Store) -> tuple[int, int, int]:
    rows = [r async for r in store.usage_rows(T0, T0 + timedelta(days=1))]
    (group,) = await store.usage_groups([], T0, T0 + timedelta(days=1))
    return len(rows), group.requests, group.cost_micros


async def test_a_row_replayed_after_a_crash_is_stored_and_summed_once(store: Store):
    # Guards a row the store committed before a kill -9 and the journal replays after:
    # it must not be counted twice, in the rows or in the sums.
    first = [_row(i, f"run1-{i}") for i in range(10)]
    assert await store.record_usage(first) == 10
    replay = first[5:] + [_row(i, f"run1-{i}") for i in range(10, 15)]
    assert await store.record_usage(replay) == 5
    assert await _totals(store) == (15, 15, 1500)


async def test_the_same_row_twice_in_one_batch_is_stored_once(store: Store):
    # Guards rows written again after a failed journal write, both copies in one batch.
    assert await store.record_usage([_row(1, "a"), _row(1, "a"), _row(2, "b")]) == 2
    assert await _totals(store) == (2, 2, 200)


async def test_rows_without_a_row_id_are_all_stored(store: Store):
    # A batch's rows, written with its answers, carry none: none may be taken for a repeat.
    assert await store.record_usage([_row(1), _row(1), _row(2)]) == 3
    assert await store.record_usage([_row(3, "x"), _row(4)]) == 2
    assert await _totals(store) == (5, 5, 500)
