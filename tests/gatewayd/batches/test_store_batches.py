"""Files, batches and their progress in the store, on SQLite and on a real PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gatewayd.gateway.metering.usage import UsageRow
from gatewayd.store import Store
from gatewayd.store.batch_records import BatchProgress, BatchRecord, FileRecord
from llmgw.errors import StoreError

T0 = datetime(2026, 3, 1, tzinfo=UTC)
# Usage rows carry the time they were made (now): read up to well past it.
_LATER = datetime.now(UTC) + timedelta(days=1)
# Files and batches belong to a project's id (its path may change).
MINE, OTHER = "ten_00000000000000aa", "ten_00000000000000bb"


def _file(file_id: str, project_id: str = MINE, **changes) -> FileRecord:
    fields = {
        "file_id": file_id,
        "project_id": project_id,
        "key_id": "key_a",
        "filename": "in.jsonl",
        "purpose": "batch",
        "bytes": 100,
        "created_at": T0,
        "expires_at": T0 + timedelta(days=30),
    }
    return FileRecord(**(fields | changes))


def _batch(batch_id: str, project_id: str = MINE, **changes) -> BatchRecord:
    fields = {
        "batch_id": batch_id,
        "project_id": project_id,
        "key_id": "key_a",
        "endpoint": "/v1/chat/completions",
        "status": "validating",
        "input_file_id": "file-1",
        "created_at": T0,
        "expires_at": T0 + timedelta(hours=24),
        "metadata": {"job": "nightly"},
    }
    return BatchRecord(**(fields | changes))


async def test_files_are_listed_per_project_newest_first_and_expire(store: Store):
    for i in range(3):
        await store.put_file(_file(f"file-{i}", bytes=10 * (i + 1)))
    await store.put_file(_file("file-x", project_id=OTHER))

    listed = await store.list_files(MINE)
    assert [f.file_id for f in listed] == ["file-2", "file-1", "file-0"]
    page = await store.list_files(MINE, after="file-2", limit=1)
    assert [f.file_id for f in page] == ["file-1"]
    up = await store.list_files(MINE, ascending=True, after="file-0")
    assert [f.file_id for f in up] == ["file-1", "file-2"]
    assert await store.list_files(MINE, purpose="batch_output") == []
    assert await store.project_file_bytes(MINE) == 60

    got = await store.get_file("file-1")
    assert got == _file("file-1", bytes=20)
    assert await store.get_file("nope") is None

    await store.put_file(_file("file-0", expires_at=T0 + timedelta(hours=1)))
    expired = await store.expired_files(T0 + timedelta(hours=2))
    assert [f.file_id for f in expired] == ["file-0"]
    assert await store.delete_file("file-0") is True
    assert await store.delete_file("file-0") is False


async def test_a_batch_keeps_its_state_and_its_counts_move_only_with_progress(store: Store):
    rec = _batch("batch_1")
    await store.create_batch(rec)
    rec.status, rec.total, rec.in_progress_at = "in_progress", 3, T0 + timedelta(seconds=1)
    rec.models = ["chat"]
    rec.completed = 99  # not written by update_batch: counts move with progress only
    await store.update_batch(rec)

    row = UsageRow(key_id="key_a", project="Acme/ml/search", model="chat", batch_id="batch_1")
    await store.record_batch_progress(
        BatchProgress(batch_id="batch_1", lines=[0, 2], completed=1, failed=1,
                      output_bytes=120, error_bytes=80, prompt_tokens=30,
                      cached_tokens=10, completion_tokens=5),
        [row, row],
    )  # fmt: skip
    got = await store.get_batch("batch_1")
    assert got.status == "in_progress" and got.total == 3 and got.models == ["chat"]
    assert (got.completed, got.failed, got.output_bytes, got.error_bytes) == (1, 1, 120, 80)
    assert (got.prompt_tokens, got.cached_tokens, got.completion_tokens) == (30, 10, 5)
    assert got.metadata == {"job": "nightly"} and got.in_progress_at == T0 + timedelta(seconds=1)
    assert await store.batch_done_lines("batch_1") == {0, 2}

    exported = [r async for r in store.usage_rows(T0 - timedelta(days=1), _LATER)]
    assert [r.batch_id for r in exported] == ["batch_1", "batch_1"]


async def test_progress_and_its_usage_are_written_together_or_not_at_all(store: Store):
    await store.create_batch(_batch("batch_1"))
    await store.record_batch_progress(
        BatchProgress(batch_id="batch_1", lines=[0], completed=1, output_bytes=10, error_bytes=0),
        [],
    )
    row = UsageRow(key_id="key_a", project="Acme/ml/search", model="chat", batch_id="batch_1")
    # Line 0 again: the done mark's key refuses it, and the usage row goes with it.
    with pytest.raises(StoreError):
        await store.record_batch_progress(
            BatchProgress(batch_id="batch_1", lines=[1, 0], completed=2,
                          output_bytes=30, error_bytes=0),
            [row],
        )  # fmt: skip
    got = await store.get_batch("batch_1")
    assert (got.completed, got.output_bytes) == (1, 10)
    assert await store.batch_done_lines("batch_1") == {0}
    exported = [r async for r in store.usage_rows(T0 - timedelta(days=1), _LATER)]
    assert exported == []


async def test_batches_are_listed_newest_first_by_project_and_status(store: Store):
    await store.create_batch(_batch("batch_1"))
    await store.create_batch(_batch("batch_2", status="completed"))
    await store.create_batch(_batch("batch_3", project_id=OTHER))

    assert [b.batch_id for b in await store.list_batches()] == ["batch_3", "batch_2", "batch_1"]
    mine = await store.list_batches(MINE)
    assert [b.batch_id for b in mine] == ["batch_2", "batch_1"]
    assert [b.batch_id for b in await store.list_batches(after="batch_2")] == ["batch_1"]
    done = await store.list_batches(status="completed")
    assert [b.batch_id for b in done] == ["batch_2"]
    assert [b.batch_id for b in await store.active_batches()] == ["batch_1", "batch_3"]
    assert await store.get_batch("batch_9") is None
