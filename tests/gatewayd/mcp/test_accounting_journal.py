"""MCP call rows through a journal on disk: durable before the answer, stored once.

A kill -9 of gatewayd right after answering a tools/call must not lose the
call's row, and a row the store had already taken when the process died must
not be stored again when the journal is replayed (SQLite and PostgreSQL).
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gatewayd.gateway.metering.journal import UsageJournal
from gatewayd.mcp.accounting import McpCallWriter, decode_call, encode_call
from gatewayd.store import Store
from gatewayd.store.mcp_records import McpCallRow

T0 = datetime(2026, 7, 28, 12, tzinfo=UTC)


def _row(i: int, row_id: str = "") -> McpCallRow:
    return McpCallRow(
        at=T0 + timedelta(seconds=i), key_id="key_a", project="Acme/ml/search", server="hr",
        tool="lookup", status="ok", latency_ms=1.5, bytes_in=120, bytes_out=i, row_id=row_id,
    )  # fmt: skip


async def _writer(store: Store, folder: Path) -> McpCallWriter:
    journal = UsageJournal(folder, encode=encode_call, decode=decode_call)
    await journal.open()
    return McpCallWriter(store, journal=journal)


async def _stored(store: Store) -> list[int]:
    return sorted(r.bytes_out for r in await store.list_mcp_calls())


def test_a_call_row_reads_back_from_its_journal_line_as_it_was():
    row = _row(3, "abc-1")
    assert decode_call(encode_call(row)) == row


async def test_a_call_row_is_on_disk_once_its_future_is_done_and_in_the_store_after(
    store: Store, tmp_path
):
    writer = await _writer(store, tmp_path / "j")
    durable = [writer.add(_row(i)) for i in range(5)]
    assert all(f is not None for f in durable)
    assert all([await f for f in durable])
    on_disk = b"".join(p.read_bytes() for p in sorted((tmp_path / "j").glob("*.jsonl")))
    assert on_disk.count(b'"server":"hr"') == 5
    assert await writer.flush() == 5
    assert await _stored(store) == [0, 1, 2, 3, 4]
    await writer.close()


async def test_rows_the_store_had_when_the_process_died_are_not_stored_twice(
    store: Store, tmp_path
):
    # Guards the replay after a crash between the store's commit and the journal
    # noting it: the segment still holds rows the store has, which must count once.
    folder, kept = tmp_path / "j", tmp_path / "as-left-by-the-crash"
    writer = await _writer(store, folder)
    for i in range(4):
        writer.add(_row(i))
    assert await writer.journal.sync()
    shutil.copytree(folder, kept, ignore=shutil.ignore_patterns("lock"))
    assert await writer.flush() == 4
    await writer.close()
    shutil.rmtree(folder)
    shutil.copytree(kept, folder)

    again = await _writer(store, folder)
    again.add(_row(4))
    assert await again.journal.sync()
    await again.flush()
    await again.close()
    assert await _stored(store) == [0, 1, 2, 3, 4]


async def test_the_store_keeps_a_call_row_id_once_and_rows_without_one_all(store: Store):
    await store.record_mcp_calls([_row(1, "a"), _row(1, "a"), _row(2, "b")])
    await store.record_mcp_calls([_row(2, "b"), _row(3), _row(3)])
    assert await _stored(store) == [1, 2, 3, 3]
