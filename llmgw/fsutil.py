"""Safe file writes: temp file in the same directory, fsync, rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never half.

    The file is created with ``mode`` from the start (secrets are never
    readable by others, not even for a moment).
    """
    if isinstance(data, str):
        data = data.encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_secret(path: Path, data: bytes | str) -> None:
    """Write a secret: 0600, atomically, in a directory only the owner can read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, data, mode=0o600)
