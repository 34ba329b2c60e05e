"""The usage writer: requests buffered on the hot path, written to the store in batches."""

from __future__ import annotations

import asyncio
import inspect
import logging
from datetime import UTC, datetime, timedelta

import pytest

from gatewayd.gateway.metering.usage import UsageRow, UsageWriter
from gatewayd.store import Store
from llmgw.errors import StoreError

T0 = datetime(2025, 3, 1, 12, tzinfo=UTC)


def _row(i: int = 0, **changes) -> UsageRow:
    fields = {"key_id": "key_a", "project": "Acme/ml/search", "model": "chat", "cost_micros": i}
    fields.update(changes)
    return UsageRow(at=T0 + timedelta(seconds=i), **fields)


class FakeStore:
    """Takes usage batches, or refuses them while ``down``; ``gate`` holds a write open."""

    def __init__(self) -> None:
        self.batches: list[list[UsageRow]] = []
        self.down = False
        self.gate: asyncio.Event | None = None

    async def record_usage(self, rows) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise StoreError("could not write usage rows: the database is gone", hint="retry")
        self.batches.append(list(rows))

    @property
    def written(self) -> list[int]:
        return [r.cost_micros for batch in self.batches for r in batch]


def test_adding_a_row_is_plain_synchronous_code():
    # The hot path must never await the store.
    assert not inspect.iscoroutinefunction(UsageWriter.add)
    writer = UsageWriter(FakeStore())  # type: ignore[arg-type]
    assert writer.add(_row()) is None and len(writer) == 1


async def test_many_rows_are_written_in_one_store_call():
    store = FakeStore()
    writer = UsageWriter(store)  # type: ignore[arg-type]
    for i in range(500):
        writer.add(_row(i))

    assert await writer.flush() == 500

    assert len(store.batches) == 1 and store.written == list(range(500))
    assert len(writer) == 0
    assert await writer.flush() == 0 and len(store.batches) == 1  # nothing: no empty write


async def test_a_backlog_is_written_in_bounded_transactions():
    store = FakeStore()
    writer = UsageWriter(store, rows_per_write=10)  # type: ignore[arg-type]
    for i in range(25):
        writer.add(_row(i))
    await writer.flush()
    assert [len(b) for b in store.batches] == [10, 10, 5] and store.written == list(range(25))


async def test_rows_survive_a_store_outage_in_their_order():
    store = FakeStore()
    store.down = True
    writer = UsageWriter(store)  # type: ignore[arg-type]
    writer.add(_row(0))
    writer.add(_row(1))

    with pytest.raises(StoreError):
        await writer.flush()
    assert len(writer) == 2 and store.batches == []

    writer.add(_row(2))
    store.down = False
    await writer.flush()
    assert store.written == [0, 1, 2]


async def test_rows_added_during_a_failed_write_come_after_the_batch():
    store = FakeStore()
    store.down, store.gate = True, asyncio.Event()
    writer = UsageWriter(store)  # type: ignore[arg-type]
    writer.add(_row(0))
    flush = asyncio.create_task(writer.flush())
    await asyncio.sleep(0)  # the write is in flight
    writer.add(_row(1))
    store.gate.set()
    with pytest.raises(StoreError):
        await flush

    store.down, store.gate = False, None
    await writer.flush()
    assert store.written == [0, 1]


async def test_the_buffer_is_bounded_and_drops_the_oldest_with_a_count(caplog):
    store = FakeStore()
    store.down = True
    writer = UsageWriter(store, max_rows=5)  # type: ignore[arg-type]
    for i in range(8):
        writer.add(_row(i))

    assert len(writer) == 5 and writer.dropped == 3
    store.down = False
    with caplog.at_level(logging.WARNING, logger="gatewayd.gateway.metering.usage"):
        await writer.flush()
    assert store.written == [3, 4, 5, 6, 7]
    assert "dropped the 3 oldest usage rows" in caplog.text


async def test_a_row_the_store_cannot_take_is_dropped_not_retried_forever(caplog):
    # Regression guard: one malformed row retried on every flush would stop
    # every later row from being written.
    class Refusing(FakeStore):
        async def record_usage(self, rows) -> None:
            if any(r.at.tzinfo is None for r in rows):
                raise ValueError("datetime has no timezone")
            await super().record_usage(rows)

    store = Refusing()
    writer = UsageWriter(store)  # type: ignore[arg-type]
    writer.add(UsageRow(key_id="k", project="p", model="m", at=datetime(2025, 1, 1)))
    with caplog.at_level(logging.ERROR, logger="gatewayd.gateway.metering.usage"):
        assert await writer.flush() == 0
    assert len(writer) == 0 and "dropped 1 usage rows" in caplog.text

    writer.add(_row(7))
    await writer.flush()
    assert store.written == [7]


async def test_run_writes_about_every_interval_and_close_writes_the_rest():
    store = FakeStore()
    writer = UsageWriter(store, interval_s=0.01)  # type: ignore[arg-type]
    task = asyncio.create_task(writer.run())
    try:
        writer.add(_row(1))
        for _ in range(200):
            if store.written:
                break
            await asyncio.sleep(0.01)
        assert store.written == [1]
        store.down = True
        writer.add(_row(2))
        await asyncio.sleep(0.05)  # failing flushes keep the row and keep running
        assert not task.done() and len(writer) == 1
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    store.down = False
    writer.add(_row(3))
    await writer.close()
    assert store.written == [1, 2, 3]


async def test_a_stop_during_a_write_neither_loses_nor_repeats_the_batch():
    store = FakeStore()
    store.gate = asyncio.Event()
    writer = UsageWriter(store, interval_s=0.001)  # type: ignore[arg-type]
    writer.add(_row(1))
    task = asyncio.create_task(writer.run())
    while len(writer):  # the batch has left the buffer: the write is in flight
        await asyncio.sleep(0.001)
    writer.add(_row(2))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.gate.set()
    await writer.close()
    assert store.written == [1, 2]


async def test_close_with_the_store_down_reports_what_is_lost(caplog):
    store = FakeStore()
    store.down = True
    writer = UsageWriter(store)  # type: ignore[arg-type]
    writer.add(_row())
    with caplog.at_level(logging.ERROR, logger="gatewayd.gateway.metering.usage"):
        await writer.close()
    assert "lost 1 usage rows at shutdown" in caplog.text


async def test_written_rows_reach_the_real_store_and_its_sums(store: Store):
    writer = UsageWriter(store)
    for i in range(50):
        writer.add(_row(i, status=500 if i % 10 == 0 else 200, prompt_tokens=2))
    await writer.close()

    (total,) = await store.usage_groups([], T0, T0 + timedelta(hours=1))
    assert (total.requests, total.errors, total.prompt_tokens) == (50, 5, 100)
    assert total.cost_micros == sum(range(50))
