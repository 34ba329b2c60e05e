"""The bytes of files (uploads and batch outputs), as chunks in the store every control plane shares.

Any control plane takes an upload, serves any file and deletes it: the bytes
are rows of ``file_chunks`` (migration 0017), each keyed by the offset it
begins at. An upload is written a chunk at a time as it arrives and is a file
only once whole: its file row is written, in one transaction, as its pending
mark goes (an upload whose control plane died is dropped by the sweep). A
batch's output and error files grow by chunks the ledger writes in the
transaction that commits their lines, so nothing past what is committed is
ever there to cut off.

Reading streams: ``chunks`` hands out about a megabyte at a time and
``lines`` a file's lines a page at a time, so neither a 200 MB download nor a
200 MB batch input is ever held whole.

Files an earlier llmgw kept under the data dir (``files/<id>``) are moved into
the store at start (``import_disk_files``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from gatewayd.store import Store
from gatewayd.store.batch_records import ACTIVE_STATUSES, CHUNK_BYTES, FileRecord
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

# What one read of a file's chunks asks for: chunks beginning within this many bytes.
PAGE_BYTES = CHUNK_BYTES
# What file ids look like (new_id and output_file_id make them); anything else
# from a URL is no file, never a path.
_FILE_ID = re.compile(r"^file-[0-9a-f]{24}(-output|-error)?$")


def is_file_id(text: str) -> bool:
    return bool(_FILE_ID.match(text))


class FileGap(StoreError):
    """A file's chunks do not follow on from each other: bytes are missing."""


class FileStore:
    def __init__(self, store: Store, *, legacy_dir: Path | None = None) -> None:
        self._store = store
        # Where an earlier llmgw kept files on disk; moved into the store at start.
        self.legacy_dir = legacy_dir
        # Set once those are in the store (at once when there is no such folder):
        # the runner resumes batches only after, so their outputs go on from whole files.
        self.imported = asyncio.Event()
        if legacy_dir is None:
            self.imported.set()

    # ---- uploads -----------------------------------------------------------

    def new_upload(self, file_id: str) -> Upload:
        """An upload to be written as ``file_id``; ``start`` it, ``write``, then ``keep``
        or ``discard``."""
        return Upload(self._store, file_id)

    async def write(self, file_id: str, data: bytes) -> None:
        """Write ``data`` as the bytes of ``file_id`` (whose row is written apart)."""
        await self._store.put_file_chunk(file_id, 0, data)

    async def remove(self, file_id: str) -> None:
        """Drop the file's bytes, if nothing still wants them."""
        await self._store.drop_file_bytes(file_id)

    # ---- reading -----------------------------------------------------------

    async def chunks(self, file_id: str) -> AsyncIterator[bytes]:
        """The file's bytes, about PAGE_BYTES at a time (nothing when it has none)."""
        at = 0
        while True:
            rows = await self._store.file_chunks(file_id, at, PAGE_BYTES)
            if not rows:
                return
            parts = []
            for start, data in rows:
                if start != at:
                    raise FileGap(
                        f"the file {file_id} has no bytes at offset {at} (next chunk at {start})"
                    )
                parts.append(data)
                at += len(data)
            yield b"".join(parts)

    async def read(self, file_id: str) -> bytes:
        """The whole file (small files: tests, the console)."""
        return b"".join([c async for c in self.chunks(file_id)])

    def lines(self, file_id: str) -> LineReader:
        return LineReader(self, file_id)


class LineReader:
    """A file's lines in order, read a page at a time: ``(number, raw)``, numbered from 1,
    without their newline. Holds one page and the line it breaks at, never the file."""

    def __init__(self, files: FileStore, file_id: str) -> None:
        self._pages = files.chunks(file_id)
        self._rest = b""
        self._number = 0
        self._page: list[tuple[int, bytes]] = []
        self._at = 0
        self.done = False
        # Bytes fetched from the store so far.
        self.bytes_read = 0

    async def next_page(self) -> list[tuple[int, bytes]] | None:
        """The whole lines the next page completes (the last line, too, at the end);
        None once every line was given."""
        if self._at < len(self._page):
            out, self._page, self._at = self._page[self._at :], [], 0
            return out
        while not self.done:
            page = await anext(self._pages, None)
            if page is None:
                self.done = True
                if not self._rest:
                    return None
                self._number += 1
                last, self._rest = self._rest, b""
                return [(self._number, last)]
            self.bytes_read += len(page)
            parts = (self._rest + page).split(b"\n")
            self._rest = parts.pop()
            if parts:
                first = self._number + 1
                self._number += len(parts)
                return list(enumerate(parts, start=first))
        return None

    async def next(self) -> tuple[int, bytes] | None:
        """The next line, or None after the last."""
        if self._at >= len(self._page):
            page = await self.next_page()
            if page is None:
                return None
            self._page, self._at = page, 0
        line = self._page[self._at]
        self._at += 1
        return line

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._pages.aclose()


class Upload:
    """An upload being written to the store; its bytes so far in ``size``. Holds at most a
    chunk in memory."""

    def __init__(self, store: Store, file_id: str) -> None:
        self._store, self.file_id = store, file_id
        self._buf = bytearray()
        self._written = 0
        self._started = False
        self.size = 0

    async def start(self) -> None:
        await self._store.begin_upload(self.file_id, datetime.now(UTC))
        self._started = True

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        self._buf += data
        while len(self._buf) >= CHUNK_BYTES:
            await self._flush(CHUNK_BYTES)

    async def _flush(self, n: int) -> None:
        chunk = bytes(self._buf[:n])
        await self._store.put_file_chunk(self.file_id, self._written, chunk)
        del self._buf[:n]
        self._written += len(chunk)

    async def keep(self, rec: FileRecord) -> None:
        """The rest written, and the file recorded: from now on every control plane serves it."""
        if self._buf:
            await self._flush(len(self._buf))
        await self._store.finish_upload(rec)

    async def discard(self) -> None:
        self._buf.clear()
        if not self._started:
            return
        try:
            await self._store.abort_upload(self.file_id)
        except StoreError as e:
            # Its pending mark stays: the sweep drops it once it is stale.
            log.warning("the upload %s is left to the sweep: %s", self.file_id, e)


# ---- files an earlier llmgw kept on disk ---------------------------------------


def _batch_of(file_id: str) -> str | None:
    """The batch whose output or error file ``file_id`` is (output_file_id's inverse)."""
    stem, _, kind = file_id.removeprefix("file-").rpartition("-")
    return f"batch_{stem}" if kind in ("output", "error") and stem else None


async def _copy_in(store: Store, file_id: str, path: Path, size: int) -> None:
    with path.open("rb") as f:
        at = 0
        while at < size:
            data = await asyncio.to_thread(f.read, min(CHUNK_BYTES, size - at))
            if not data:
                break
            await store.put_file_chunk(file_id, at, data)
            at += len(data)


async def import_disk_files(store: Store, folder: Path) -> int:
    """Move the files an earlier llmgw kept under ``folder`` into the store: a recorded
    file whole, the output of a batch still running up to what it committed. Each is
    removed from disk once in; what no row wants is left there (and logged). How many
    went in."""
    if not folder.is_dir():
        return 0
    moved, left = 0, []
    for path in sorted(folder.iterdir()):
        name = path.name
        if name.startswith(".upload-"):
            path.unlink(missing_ok=True)  # an upload that never finished
            continue
        if not is_file_id(name):
            continue
        size = None
        rec = await store.get_file(name)
        if rec is not None:
            size = rec.bytes
        elif (batch_id := _batch_of(name)) is not None:
            batch = await store.get_batch(batch_id)
            if batch is not None and batch.status in ACTIVE_STATUSES:
                size = batch.output_bytes if name.endswith("-output") else batch.error_bytes
        if size is None:
            left.append(name)
            continue
        if not await store.file_chunks(name, 0, 1):
            await _copy_in(store, name, path, size)
            moved += 1
        path.unlink(missing_ok=True)
    if moved:
        log.info("moved %d files from %s into the store", moved, folder)
    if left:
        log.warning(
            "%d files under %s belong to no file or running batch and were left there: %s",
            len(left),
            folder,
            ", ".join(left[:5]),
        )
    with contextlib.suppress(OSError):
        folder.rmdir()  # only once empty
    return moved
