"""The usage journal: rows on disk before an answer ends, replayed once after a crash."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gatewayd.gateway.metering.journal import JournalError, UsageJournal, encode
from gatewayd.gateway.metering.usage import UsageRow, UsageWriter
from gatewayd.store import SqliteStore
from llmgw.errors import StoreError

T0 = datetime(2025, 3, 1, 12, tzinfo=UTC)


def _row(i: int = 0) -> UsageRow:
    return UsageRow(
        at=T0 + timedelta(seconds=i), key_id="key_a", project="Acme/ml/search", model="chat",
        cost_micros=i, prompt_tokens=3, completion_tokens=5,
    )  # fmt: skip


class FlakyStore:
    """Takes usage batches, or refuses them while ``down`` (a store that went away)."""

    def __init__(self) -> None:
        self.rows: list[UsageRow] = []
        self.down = False

    async def record_usage(self, rows) -> int:
        if self.down:
            raise StoreError("could not write usage rows: the database is gone", hint="retry")
        self.rows += rows
        return len(rows)


def _crash(journal: UsageJournal) -> None:
    """What kill -9 leaves: no close, the files as they are, the lock let go."""
    if journal._task is not None:
        journal._task.cancel()
    os.close(journal._fd)
    os.close(journal._lock_fd)
    journal._executor.shutdown(wait=True)


def _segments(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.jsonl"))


async def _sqlite(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "llmgw.db")
    await store.open()
    return store


async def _stored_costs(store: SqliteStore) -> list[int]:
    async with store._conn.execute("SELECT cost_micros FROM usage_rows ORDER BY id") as cur:
        return [r[0] for r in await cur.fetchall()]


async def test_rows_appended_together_are_made_durable_by_one_group_commit(tmp_path):
    # Guards against an fsync per request: 200 answers at once cost one.
    journal = UsageJournal(tmp_path / "j")
    await journal.open()
    futures = [journal.append(_row(i)) for i in range(200)]
    assert not any(f.done() for f in futures)  # not durable until the commit ran
    assert all(await asyncio.gather(*(asyncio.shield(f) for f in futures)))
    assert journal.commits == 1
    lines = (tmp_path / "j" / _segments(tmp_path / "j")[0]).read_bytes().splitlines()
    assert len(lines) == 200
    await journal.close()


async def test_each_row_gets_an_id_of_its_own_across_runs(tmp_path):
    ids = set()
    for _ in range(2):
        journal = UsageJournal(tmp_path / "j")
        await journal.open()
        rows = [_row(i) for i in range(50)]
        for r in rows:
            journal.append(r)
        await journal.sync()
        ids |= {r.row_id for r in rows}
        _crash(journal)
    assert len(ids) == 100


async def test_a_second_journal_on_the_same_folder_is_refused_by_name(tmp_path):
    journal = UsageJournal(tmp_path / "j")
    await journal.open()
    with pytest.raises(JournalError, match="another gatewayd"):
        await UsageJournal(tmp_path / "j").open()
    await journal.close()


async def test_rows_of_a_crashed_run_are_replayed_once_even_those_the_store_had(tmp_path):
    # Guards the loss (rows of a killed process) and its opposite: a row
    # the store committed before the crash, its segment not yet removed, counted twice.
    store = await _sqlite(tmp_path)
    journal = UsageJournal(tmp_path / "j")
    await journal.open()
    writer = UsageWriter(store, journal=journal)
    for i in range(60):
        writer.add(_row(i))
    await journal.sync()
    assert await writer.flush() == 60  # in the store, the segment still there
    for i in range(60, 100):
        writer.add(_row(i))
    await journal.sync()
    _crash(journal)

    again = UsageJournal(tmp_path / "j")
    await again.open()
    writer = UsageWriter(store, journal=again)
    assert await writer.flush() == 100  # all read back, the store skips the 60 it has
    assert await _stored_costs(store) == list(range(100))
    await writer.close()
    assert _segments(tmp_path / "j") == []  # nothing left to replay
    await store.close()


async def test_a_torn_last_line_is_skipped_and_the_rows_before_it_kept(tmp_path):
    # Guards a start that fails, or loses the good rows, on a line cut by a kill mid-write.
    folder = tmp_path / "j"
    folder.mkdir()
    good = b"".join(encode(UsageRow(**vars_of(_row(i)), row_id=f"r{i}")) for i in range(3))
    (folder / "00000001.jsonl").write_bytes(good + encode(_row(9))[:25])
    store = await _sqlite(tmp_path)
    journal = UsageJournal(folder)
    await journal.open()
    writer = UsageWriter(store, journal=journal)
    assert await writer.flush() == 3
    assert await _stored_costs(store) == [0, 1, 2]
    assert _segments(folder) == ["00000002.jsonl"]  # the replayed one removed
    await writer.close()
    await store.close()


def vars_of(row: UsageRow) -> dict:
    return {k: getattr(row, k) for k in row.__slots__ if k != "row_id"}


async def test_rows_wait_out_a_store_outage_on_disk_and_arrive_in_order(tmp_path):
    # Guards rows dropped (or reordered) when the store is down for minutes: they stay
    # in the journal's segments, which go only once the store has every row in them.
    store = FlakyStore()
    journal = UsageJournal(tmp_path / "j", segment_bytes=4096)
    await journal.open()
    writer = UsageWriter(store, journal=journal, rows_per_write=50)  # type: ignore[arg-type]
    store.down = True
    for i in range(300):
        writer.add(_row(i))
        if i % 40 == 0:
            await journal.sync()  # several commits, so several segments
    await journal.sync()
    with pytest.raises(StoreError):
        await writer.flush()
    kept = _segments(tmp_path / "j")
    assert len(kept) > 3 and store.rows == []

    store.down = False
    assert await writer.flush() == 300
    assert [r.cost_micros for r in store.rows] == list(range(300))
    assert len(_segments(tmp_path / "j")) == 1  # only the segment being written to
    await writer.close()
    assert _segments(tmp_path / "j") == []


async def test_a_failed_write_keeps_the_rows_and_writes_them_when_the_disk_takes_them(
    tmp_path, monkeypatch
):
    # Guards rows lost, or requests left waiting for ever, when the disk refuses a write.
    journal = UsageJournal(tmp_path / "j", retry_s=0.01)
    await journal.open()
    real = os.fdatasync
    failing = {"left": 1}

    def fdatasync(fd):
        if failing["left"]:
            failing["left"] -= 1
            raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    first = journal.append(_row(0))
    assert await asyncio.shield(first) is False  # answered anyway, the row kept
    assert await journal.sync()
    store = FlakyStore()
    writer = UsageWriter(store, journal=journal)  # type: ignore[arg-type]
    await writer.flush()
    assert [r.cost_micros for r in store.rows] == [0]
    await writer.close()


def test_a_row_made_durable_survives_kill_9_of_its_process(tmp_path):
    # The real thing: a process killed outright right after its rows were reported durable.
    script = textwrap.dedent(
        f"""
        import asyncio, sys, time
        from pathlib import Path
        from tests.gatewayd.gateway.test_usage_journal import _row
        from gatewayd.gateway.metering.journal import UsageJournal

        async def main():
            j = UsageJournal(Path({str(tmp_path / "j")!r}))
            await j.open()
            futures = [j.append(_row(i)) for i in range(500)]
            await asyncio.gather(*(asyncio.shield(f) for f in futures))
            print("durable", flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    assert proc.stdout.readline().strip() == "durable"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    async def replay() -> list[int]:
        store = await _sqlite(tmp_path)
        journal = UsageJournal(tmp_path / "j")
        await journal.open()
        writer = UsageWriter(store, journal=journal)
        await writer.flush()
        await writer.close()
        costs = await _stored_costs(store)
        await store.close()
        return costs

    assert asyncio.run(replay()) == list(range(500))
