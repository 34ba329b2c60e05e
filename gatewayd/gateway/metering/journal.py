"""The usage journal: every answered request's row on local disk before its answer ends.

A process killed -9, or a store down for minutes, must not lose a row the
client was answered for. Rows are appended, one JSON line each with a row id
of their own, to numbered segment files under the control plane's data dir
(``usage-journal/00000001.jsonl`` …). Appends are committed in groups: one
task writes and fdatasyncs everything appended since its last commit, in a
thread of its own, and each group's future completes when its rows are on
disk. The gateway holds a request's last bytes until then, so at 500 req/s it
is a few fsyncs a second, never one per request.

The usage writer reads the rows back in order (``read``) and, once the store
has committed them, says so (``consumed``): a segment is removed only when
every row in it is in the store. Through a store outage rows stay here,
bounded by the disk. At start, what older segments hold is replayed into the
store before the gateway serves; the store ignores a row id it already has,
so a row written just before a crash and replayed after is counted once.
A torn last line (the process died mid-write) is skipped: its request was
not answered.

Another kind of row (MCP call rows) is journaled the same way in a folder of
its own, given its ``encode`` and ``decode``; a row kind needs a ``row_id``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import json
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from gatewayd.gateway.metering.usage import UsageRow
from llmgw.errors import LlmgwError

log = logging.getLogger(__name__)

# ~1 MiB: ~3,000 rows, a few seconds of a busy gateway; what a crash makes
# the next start replay (deduplicated) at most.
SEGMENT_BYTES = 1 << 20
# Rows kept in memory while the disk refuses writes, before the oldest go.
MAX_PENDING_ROWS = 100_000
# After a failed write: how long before trying again (a full disk stays full).
RETRY_S = 1.0
_FIELDS = tuple(f.name for f in fields(UsageRow))
_SUFFIX = ".jsonl"


class JournalError(LlmgwError):
    """The journal folder cannot be used."""


@dataclass(slots=True)
class _Segment:
    number: int
    path: Path
    # Bytes known durable (this process's segments) or found at start.
    end: int
    closed: bool
    # Found at start: its last line may be torn.
    found: bool = False


# Where the store has everything before: (segment number, byte offset).
Mark = tuple[int, int]


def encode(row: UsageRow) -> bytes:
    d = {name: getattr(row, name) for name in _FIELDS}
    d["at"] = row.at.isoformat()
    return json.dumps(d, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> UsageRow:
    d = json.loads(line)
    d["at"] = datetime.fromisoformat(d["at"])
    return UsageRow(**{k: v for k, v in d.items() if k in _FIELDS})


class UsageJournal:
    """Append-only, group-committed segments of usage rows in ``folder``.

    ``encode``/``decode``: a row to one JSON line and back (usage rows by default).
    """

    def __init__(
        self,
        folder: Path,
        *,
        segment_bytes: int = SEGMENT_BYTES,
        max_pending_rows: int = MAX_PENDING_ROWS,
        retry_s: float = RETRY_S,
        encode: Callable[[Any], bytes] = encode,
        decode: Callable[[bytes], Any] = decode,
    ) -> None:
        self.folder = folder
        self._encode = encode
        self._decode = decode
        self._segment_bytes = segment_bytes
        self._max_pending = max_pending_rows
        self._retry_s = retry_s
        self._segments: list[_Segment] = []
        self._cursor: Mark = (0, 0)
        self._lines: list[bytes] = []
        self._group: asyncio.Future | None = None
        self._wake = asyncio.Event()
        self._fd = -1
        self._lock_fd = -1
        self._task: asyncio.Task | None = None
        # One thread writes and syncs: no thread per request, and the loop never blocks on disk.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "usage-journal")
        self._prefix = secrets.token_hex(8) + "-"
        self._seq = 0
        self.dropped = 0  # rows lost to the bound while the disk refused writes
        self.commits = 0  # groups made durable, for tests and figures
        self._failing = False

    # ---- opening and closing ------------------------------------------------

    async def open(self) -> None:
        """Find what earlier runs left, start a segment of this run's own, start committing."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd = os.open(self.folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise JournalError(
                f"another gatewayd uses the usage journal in {self.folder}",
                hint="run one control plane per data dir",
            ) from None
        for path in sorted(self.folder.glob("*" + _SUFFIX)):
            if path.stem.isdigit():
                size = path.stat().st_size
                self._segments.append(_Segment(int(path.stem), path, size, True, found=True))
        if self._segments:
            self._cursor = (self._segments[0].number, 0)
        await self._new_segment()
        if not self._segments[0].found:
            self._cursor = (self._segments[0].number, 0)
        self._task = asyncio.create_task(self._commit_loop(), name="usage-journal")

    async def sync(self) -> bool:
        """Wait for the commit of every row appended so far: True once on disk, False if
        the disk refused it (the rows stay queued for the next try)."""
        group = self._group
        if group is None:
            return not self._lines
        return await asyncio.shield(group)

    @property
    def mark(self) -> Mark:
        """Where the rows the store may not have begin."""
        return self._cursor

    @property
    def backlog_segments(self) -> int:
        """Segments holding rows the store may not have yet."""
        return len(self._segments)

    async def close(self) -> None:
        """Commit what is pending, stop; a segment the store has wholly is removed."""
        if self._task is not None:
            if self._failing or not await self.sync():
                log.error("lost %d usage rows the disk would not take", len(self._lines))
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._remove_consumed()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        active = self._segments[-1] if self._segments else None
        if active is not None and self._cursor == (active.number, active.end):
            with contextlib.suppress(OSError):
                active.path.unlink()
            self._segments.pop()
        self._executor.shutdown(wait=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # ---- the hot path -------------------------------------------------------

    def append(self, row: UsageRow) -> asyncio.Future:
        """Give the row an id and queue it; the future is True once it is on disk (False:
        the disk refused it for now; it stays queued). Never blocks."""
        if not row.row_id:
            row.row_id = self.next_row_id()
        if len(self._lines) >= self._max_pending:
            self._lines.pop(0)
            self.dropped += 1
        self._lines.append(self._encode(row))
        group = self._group
        if group is None:
            group = self._group = asyncio.get_running_loop().create_future()
            self._wake.set()
        return group

    def next_row_id(self) -> str:
        """A row id no other row of this journal has, in this run or another (for a row
        kind that cannot be changed once made, given before ``append``)."""
        row_id = f"{self._prefix}{self._seq:x}"
        self._seq += 1
        return row_id

    async def _commit_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            lines, group = self._lines, self._group
            self._lines, self._group = [], None
            if not lines:
                if group is not None and not group.done():
                    group.set_result(True)
                continue
            data = b"".join(lines)
            try:
                if self._segments[-1].closed:
                    await self._new_segment()  # after a failed write: a fresh file
                active = self._segments[-1]
                await self._run(self._write, self._fd, data)
            except OSError as e:
                self._write_failed(e, lines, group)
                await asyncio.sleep(self._retry_s)
                self._wake.set()
                continue
            if self._failing:
                log.warning("the usage journal is written again")
                self._failing = False
            active.end += len(data)
            self.commits += 1
            if group is not None and not group.done():
                group.set_result(True)
            if active.end >= self._segment_bytes:
                try:
                    await self._new_segment()
                except OSError as e:
                    log.warning("no new usage journal segment, the current one grows: %s", e)

    def _write_failed(self, e: OSError, lines: list[bytes], group) -> None:
        # After a failed write or fsync the file's tail is unknown (Linux may even
        # drop the dirty pages): the segment ends at its last durable byte and the
        # rows are written again in a new one. Duplicates are the store's to ignore.
        if not self._failing:
            log.error("the usage journal cannot be written, rows kept in memory: %s", e)
        self._failing = True
        self._lines = lines + self._lines
        over = len(self._lines) - self._max_pending
        if over > 0:
            del self._lines[:over]
            self.dropped += over
        self._segments[-1].closed = True
        if self._group is None:
            # The rows put back are waited on like any appended now.
            self._group = asyncio.get_running_loop().create_future()
        if group is not None and not group.done():
            group.set_result(False)

    # ---- disk work, in the journal's thread --------------------------------

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fdatasync(fd)

    def _create(self, path: Path) -> int:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)
        # The new name itself must survive a crash before any row in it counts as durable.
        dir_fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return fd

    async def _new_segment(self) -> None:
        # The file is made in the journal's thread; the list of segments changes only
        # on the loop, where read() and consumed() look at it.
        number = self._segments[-1].number + 1 if self._segments else 1
        path = self.folder / f"{number:08d}{_SUFFIX}"
        fd = await self._run(self._create, path)
        if self._fd >= 0:
            os.close(self._fd)
        if self._segments:
            self._segments[-1].closed = True
        self._fd = fd
        self._segments.append(_Segment(number, path, 0, False))

    # ---- reading back, for the usage writer -------------------------------

    async def read(self, limit: int) -> tuple[list[UsageRow], Mark]:
        """Up to ``limit`` durable rows from where the store's rows end, and the mark past them."""
        spans = []
        number, offset = self._cursor
        for seg in self._segments:
            if seg.number < number:
                continue
            start = offset if seg.number == number else 0
            spans.append((seg.number, seg.path, start, seg.end, seg.closed, seg.found))
        return await asyncio.to_thread(_read_spans, spans, limit, self._cursor, self._decode)

    def consumed(self, mark: Mark) -> None:
        """The store has every row before ``mark``: segments wholly before it go."""
        self._cursor = max(self._cursor, mark)
        self._remove_consumed()

    def _remove_consumed(self) -> None:
        number, offset = self._cursor
        keep = []
        for i, seg in enumerate(self._segments):
            last = i == len(self._segments) - 1
            done = seg.number < number or (seg.number == number and offset >= seg.end)
            if seg.closed and done and not last:
                with contextlib.suppress(FileNotFoundError):
                    seg.path.unlink()
                continue
            keep.append(seg)
        self._segments = keep
        first = self._segments[0] if self._segments else None
        if first is not None and first.number > number:
            self._cursor = (first.number, 0)


def _read_spans(spans, limit: int, cursor: Mark, decode=decode) -> tuple[list, Mark]:
    rows: list = []
    mark = cursor
    for number, path, start, end, closed, found in spans:
        if start >= end:
            mark = (number, start)
            if closed:
                continue
            break
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        pos = 0
        while len(rows) < limit:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            line = data[pos:nl]
            pos = nl + 1
            try:
                rows.append(decode(line))
            except (ValueError, TypeError, KeyError) as e:
                log.warning("skipped a journal line %s could not read: %s", path, e)
        if len(rows) >= limit:
            return rows, (number, start + pos)
        if pos < len(data) and found:
            # A torn last line: the process died writing it, its request unanswered.
            log.warning("skipped a torn last line in journal %s", path)
            pos = len(data)
        mark = (number, start + pos)
        if not closed:
            break
    return rows, mark
