"""Files' bytes in the store (``file_chunks``), and what lets any control plane serve files and
carry batches on: uploads made whole at once, bytes kept while a batch reads them, progress
that a second run cannot commit over, cancels asked from anywhere, a project's load. On
SQLite and on a real PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gatewayd.batches.filestore import FileGap, FileStore, import_disk_files
from gatewayd.batches.objects import output_file_id
from gatewayd.store import Store
from gatewayd.store.batch_records import CHUNK_BYTES, BatchMoved, BatchProgress
from tests.gatewayd.batches.test_store_batches import MINE, OTHER, T0, _batch, _file

BATCH = "batch_0000000000aa00000000cafe"
OUT = output_file_id(BATCH, "output")
INPUT = "file-0000000000aa0000000000ff"


async def _chunks_of(store: Store, file_id: str) -> list[int]:
    return [at for at, _ in await store.file_chunks(file_id, 0, 1 << 40)]


async def test_an_upload_is_a_file_only_once_whole_and_reads_back_a_page_at_a_time(store: Store):
    files = FileStore(store)
    data = bytes(range(256)) * (CHUNK_BYTES // 128 + 7)  # two chunks and a bit
    upload = files.new_upload(INPUT)
    await upload.start()
    for i in range(0, len(data), 70_000):
        await upload.write(data[i : i + 70_000])
    # Chunks written as they fill, no file row yet: no one lists it.
    assert await _chunks_of(store, INPUT) == [0, CHUNK_BYTES]
    assert await store.get_file(INPUT) is None
    await upload.keep(_file(INPUT, bytes=upload.size))
    assert (await store.get_file(INPUT)).bytes == len(data)
    pages = [p async for p in files.chunks(INPUT)]
    assert len(pages) == 3 and b"".join(pages) == data
    # Nothing is swept: it is recorded.
    assert await store.sweep_file_bytes(datetime.now(UTC) + timedelta(days=1)) == 0

    lines = files.lines(INPUT)
    text = b"".join(b"line %d\n" % i for i in range(50_000)) + b"no newline"
    await files.write("file-0000000000aa0000000000ee", text)
    lines = files.lines("file-0000000000aa0000000000ee")
    got = []
    while (line := await lines.next()) is not None:
        got.append(line)
    assert got[0] == (1, b"line 0") and got[-2] == (50_000, b"line 49999")
    assert got[-1] == (50_001, b"no newline") and lines.bytes_read == len(text)


async def test_an_upload_dropped_or_left_by_a_dead_control_plane_leaves_no_bytes(store: Store):
    upload = FileStore(store).new_upload(INPUT)
    await upload.start()
    await upload.write(b"x" * (CHUNK_BYTES + 5))
    await upload.discard()
    assert await _chunks_of(store, INPUT) == []

    # Begun, a chunk written, then the control plane died: kept while it may go on,
    # dropped once stale.
    left = "file-0000000000aa0000000000dd"
    await store.begin_upload(left, T0)
    await store.put_file_chunk(left, 0, b"half")
    assert await store.sweep_file_bytes(T0 - timedelta(hours=1)) == 0
    assert await _chunks_of(store, left) == [0]
    assert await store.sweep_file_bytes(T0 + timedelta(hours=1)) == 1
    assert await _chunks_of(store, left) == []


async def test_an_input_deleted_while_its_batch_runs_keeps_its_bytes_until_the_batch_ends(
    store: Store,
):
    await store.put_file_chunk(INPUT, 0, b"the requests\n")
    await store.put_file(_file(INPUT, bytes=13))
    await store.create_batch(_batch(BATCH, input_file_id=INPUT, status="in_progress"))
    assert await store.delete_file(INPUT) is True
    assert await store.get_file(INPUT) is None
    assert await store.file_chunks(INPUT) == [(0, b"the requests\n")]
    assert await store.drop_file_bytes(INPUT) == 0  # the batch reads it still

    done = await store.get_batch(BATCH)
    await store.update_batch(done.model_copy(update={"status": "completed"}))
    assert await store.drop_file_bytes(INPUT) == 1
    assert await store.file_chunks(INPUT) == []


async def test_progress_writes_its_bytes_and_one_from_moved_ends_writes_nothing(store: Store):
    await store.create_batch(_batch(BATCH, status="in_progress"))
    first = b"a" * 10
    await store.record_batch_progress(
        BatchProgress(batch_id=BATCH, lines=[0], completed=1, output_bytes=10, error_bytes=0,
                      from_output_bytes=0, from_error_bytes=0, output=first),
        [],
    )  # fmt: skip
    # A second run that read the batch before that commit goes on from the old ends.
    with pytest.raises(BatchMoved):
        await store.record_batch_progress(
            BatchProgress(batch_id=BATCH, lines=[1], completed=1, output_bytes=10,
                          error_bytes=0, from_output_bytes=0, from_error_bytes=0,
                          output=b"b" * 10),
            [],
        )  # fmt: skip
    big = b"c" * (CHUNK_BYTES + 1)
    err = b"e" * 3
    await store.record_batch_progress(
        BatchProgress(batch_id=BATCH, lines=[1, 2], completed=1, failed=1,
                      output_bytes=10 + len(big), error_bytes=3, from_output_bytes=10,
                      from_error_bytes=0, output=big, error=err),
        [],
    )  # fmt: skip
    got = await store.get_batch(BATCH)
    assert (got.completed, got.failed, got.output_bytes, got.error_bytes) == (2, 1, 10 + len(big), 3)
    assert await store.batch_done_lines(BATCH) == {0, 1, 2}
    assert await store.batch_done_lines(BATCH, 1, 2) == {1}
    assert await _chunks_of(store, OUT) == [0, 10, 10 + CHUNK_BYTES]
    assert await FileStore(store).read(OUT) == first + big
    assert await FileStore(store).read(output_file_id(BATCH, "error")) == err


async def test_a_gap_in_a_files_chunks_is_an_error_not_a_short_file(store: Store):
    await store.put_file_chunk(INPUT, 0, b"abc")
    await store.put_file_chunk(INPUT, 10, b"xyz")
    with pytest.raises(FileGap):
        await FileStore(store).read(INPUT)


async def test_a_cancel_is_asked_once_of_a_running_batch_and_a_projects_load_is_counted(
    store: Store,
):
    await store.create_batch(_batch("batch_1", status="in_progress", input_bytes=100))
    await store.create_batch(_batch("batch_2", status="validating", input_bytes=50))
    await store.create_batch(_batch("batch_3", status="completed", input_bytes=1000))
    await store.create_batch(_batch("batch_4", project_id=OTHER, input_bytes=7))
    assert await store.project_batch_load(MINE) == (2, 150)
    assert await store.project_batch_load(OTHER) == (1, 7)

    assert await store.request_batch_cancel("batch_1", T0) is True
    assert await store.request_batch_cancel("batch_1", T0) is False  # asked already
    assert await store.request_batch_cancel("batch_3", T0) is False  # ended
    got = await store.get_batch("batch_1")
    assert got.cancel_requested_at == T0 and got.status == "in_progress"
    # The runner's own writes leave the request be.
    await store.update_batch(got.model_copy(update={"status": "cancelling", "cancelling_at": T0}))
    assert (await store.get_batch("batch_1")).cancel_requested_at == T0


async def test_files_an_earlier_llmgw_kept_on_disk_are_moved_into_the_store(
    store: Store, tmp_path
):
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / INPUT).write_bytes(b"an upload\n")
    await store.put_file(_file(INPUT, bytes=10))
    # A running batch's output, with a tail its run never committed.
    await store.create_batch(_batch(BATCH, status="in_progress"))
    await store.record_batch_progress(
        BatchProgress(batch_id=BATCH, lines=[0], completed=1, output_bytes=6, error_bytes=0),
        [],
    )  # fmt: skip
    (folder / OUT).write_bytes(b"line0\nhalf a li")
    (folder / "file-0000000000aa0000000000cc").write_bytes(b"nobody's")
    (folder / ".upload-1234").write_bytes(b"partial")

    assert await import_disk_files(store, folder) == 2
    files = FileStore(store)
    assert await files.read(INPUT) == b"an upload\n"
    assert await files.read(OUT) == b"line0\n"
    assert sorted(p.name for p in folder.iterdir()) == ["file-0000000000aa0000000000cc"]
