"""The bytes of files (uploads and batch outputs), one file per id under the data dir.

Uploads are written to a temporary name and renamed once whole, so a file id
never names half a file. A batch's output and error files grow in place by
appends; their committed length is in the store, and anything past it (a run
killed between writing and committing) is cut off before writing resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

from llmgw.errors import StoreError

CHUNK_BYTES = 1 << 20
# What file ids look like (new_id and output_file_id make them); anything else
# from a URL is no file, never a path.
_FILE_ID = re.compile(r"^file-[0-9a-f]{24}(-output|-error)?$")


def is_file_id(text: str) -> bool:
    return bool(_FILE_ID.match(text))


class FileStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def ensure(self) -> None:
        try:
            # 0700: the files hold what clients asked and what models answered.
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise StoreError(
                f"cannot create the files folder {self.root}: {e.strerror}",
                hint="check the data dir's permissions",
            ) from e

    def path(self, file_id: str) -> Path:
        if not is_file_id(file_id):
            raise ValueError(f"{file_id!r} is not a file id")
        return self.root / file_id

    # ---- uploads -----------------------------------------------------------

    def new_upload(self):
        """An open temporary file for an upload; ``keep`` renames it, ``discard`` drops it."""
        self.ensure()
        tmp = self.root / f".upload-{secrets.token_hex(8)}"
        return Upload(tmp, open(tmp, "wb"))  # closed by keep() or discard()

    def remove(self, file_id: str) -> None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            self.path(file_id).unlink()

    async def chunks(self, file_id: str) -> AsyncIterator[bytes]:
        """The file's bytes, a chunk at a time (FileNotFoundError when it is gone)."""
        f = await asyncio.to_thread(open, self.path(file_id), "rb")
        try:
            while chunk := await asyncio.to_thread(f.read, CHUNK_BYTES):
                yield chunk
        finally:
            f.close()

    async def read(self, file_id: str) -> bytes:
        return await asyncio.to_thread(self.path(file_id).read_bytes)

    # ---- a batch's output and error files ------------------------------------

    def cut(self, file_id: str, size: int) -> None:
        """Make the file exactly ``size`` bytes: past that it was never committed."""
        self.ensure()
        fd = os.open(self.path(file_id), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def append(self, file_id: str, data: bytes) -> None:
        if not data:
            return
        fd = os.open(self.path(file_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


class Upload:
    """An upload being written; its bytes so far in ``size``."""

    def __init__(self, path: Path, f) -> None:
        self.path, self._f, self.size = path, f, 0

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        await asyncio.to_thread(self._f.write, data)

    async def keep(self, final: Path) -> None:
        def done():
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.replace(self.path, final)

        await asyncio.to_thread(done)

    def discard(self) -> None:
        self._f.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
