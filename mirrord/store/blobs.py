"""Content-addressed blobs: ``blobs/sha256/<sha[:2]>/<sha256>``, read-only, never overwritten.

A blob is put in place only once its digest is known to be right (the caller
hashed it on the way in), by a rename from the store's own incoming folder
on the same filesystem. Two revisions holding the same bytes share one blob.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from llmgw.mirror.names import SHA256_RE
from mirrord.store.errors import StoreError


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "blobs" / "sha256"
        self.root.mkdir(parents=True, exist_ok=True)
        # Bytes on disk, kept as blobs come and go (scanned once at start).
        self.total_bytes = sum(size for _, size in self.scan())

    def path(self, sha256: str) -> Path:
        if not SHA256_RE.fullmatch(sha256 or ""):
            raise StoreError(f"{sha256!r} is not a sha256 digest")
        return self.root / sha256[:2] / sha256

    def has(self, sha256: str) -> bool:
        try:
            return self.path(sha256).is_file()
        except StoreError:
            return False

    def size(self, sha256: str) -> int:
        return self.path(sha256).stat().st_size

    def adopt(self, tmp: Path, sha256: str) -> Path:
        """Move ``tmp`` (hashed by the caller to ``sha256``) in; drop it if the blob is held."""
        dest = self.path(sha256)
        if dest.is_file():
            tmp.unlink(missing_ok=True)
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        size = tmp.stat().st_size
        os.chmod(tmp, 0o444)
        os.replace(tmp, dest)
        self.total_bytes += size
        return dest

    def remove(self, sha256: str) -> int:
        """Remove a blob; the bytes freed (0 when it was not there)."""
        p = self.path(sha256)
        try:
            size = p.stat().st_size
            p.unlink()
        except FileNotFoundError:
            return 0
        self.total_bytes -= size
        return size

    def scan(self) -> Iterator[tuple[str, int]]:
        """Every blob on disk: (sha256, size)."""
        if not self.root.is_dir():
            return
        for sub in self.root.iterdir():
            if not sub.is_dir():
                continue
            for f in sub.iterdir():
                if SHA256_RE.fullmatch(f.name) and f.is_file():
                    yield f.name, f.stat().st_size
