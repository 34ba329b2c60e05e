"""Copying one revision from a peer: every file not held fetched, checked against its digest, held.

Model files come through the peer's Hugging Face API at the exact commit
(``/{repo}/resolve/{commit}/{path}``), wheels and engine archives from
``/blobs/sha256/{sha256}``. Each file is streamed to the store's incoming
folder under ``peer-<sha256>.part`` and resumed with ``Range`` after a cut
(206 appends, 200 starts over). The copy is held only when every file's
sha256 and size are what the peer's State says: the blobs are adopted and
the revision put in one step, with nothing awaited between, so a removal's
collection of unreferenced blobs cannot run in the middle.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from llmgw.errors import LlmgwError
from llmgw.mirror.names import SHA256_RE, check_file_path
from llmgw.mirror.wire import FileEntry, Revision
from mirrord.peers.plan import Copy
from mirrord.store import Incomplete, MirrorStore

log = logging.getLogger(__name__)

# Parts of an earlier, cut copy are hashed again in chunks this large (in a thread).
REHASH_CHUNK_BYTES = 8 << 20


class CopyFailed(LlmgwError):
    """A peer's revision could not be copied now (the peer went away, answered oddly)."""

    code = "unavailable"


class CopyRefused(CopyFailed):
    """A peer served bytes that are not what its own State says: nothing of it is kept."""

    code = "refused"


def files_of(rev: Revision) -> list[FileEntry]:
    files = list(rev.files or [])
    for f in files:
        check_file_path(f.path)
        if not SHA256_RE.fullmatch(f.sha256):
            raise CopyRefused(f"the peer lists {rev.repo}: {f.path} with no sha256")
    if not files:
        raise CopyRefused(f"the peer lists {rev.repo}@{rev.commit[:12]} with no files")
    return files


def _hash_into(path: Path, h: Any) -> Any:
    """``h`` (a hashlib sha256) updated with the bytes of ``path``; run in a thread."""
    with path.open("rb") as f:
        while chunk := f.read(REHASH_CHUNK_BYTES):
            h.update(chunk)
    return h


class PeerCopier:
    def __init__(self, store: MirrorStore, client: httpx.AsyncClient) -> None:
        self.store = store
        self.client = client

    def _url(self, peer_url: str, rev: Revision, f: FileEntry) -> str:
        if rev.kind == "model":
            return f"{peer_url}/{rev.repo}/resolve/{rev.commit}/{quote(f.path)}"
        return f"{peer_url}/blobs/sha256/{f.sha256}"

    async def copy(self, peer_url: str, token: str, c: Copy) -> Revision:
        """Hold the peer's revision here (its added time and the given refs kept)."""
        rev = c.revision
        files = files_of(rev)
        attempt = 0
        while True:
            attempt += 1
            wanted: dict[str, FileEntry] = {}
            for f in files:
                if not self.store.has_blob(f.sha256):
                    wanted.setdefault(f.sha256, f)
            self.store.check_room(sum(f.size for f in wanted.values()))
            parts: dict[str, Path] = {}
            try:
                for sha, f in wanted.items():
                    parts[sha] = await self._fetch(self._url(peer_url, rev, f), token, f)
            except CopyRefused:
                # Nothing of a refused copy is kept, not even its files that were right.
                for part in parts.values():
                    part.unlink(missing_ok=True)
                raise
            # From here to put() nothing is awaited: a gc cannot take what was adopted.
            for sha, part in parts.items():
                self.store.adopt_blob(part, sha)
            try:
                return self.store.put(rev, refs=c.refs, added_unix=rev.added_unix)
            except Incomplete:
                # A blob held when the copy began was collected since (a removal here):
                # fetch what is missing once more.
                if attempt == 2:
                    raise

    async def _fetch(self, url: str, token: str, f: FileEntry) -> Path:
        """The file at ``url`` in incoming/, checked to be ``f``'s bytes; its path."""
        part = self.store.incoming_dir / f"peer-{f.sha256}.part"
        have = part.stat().st_size if part.exists() else 0
        if have > f.size:
            part.unlink()
            have = 0
        if have == f.size and part.exists():
            done = await asyncio.to_thread(_hash_into, part, hashlib.sha256())
            if done.hexdigest() == f.sha256:
                return part
            part.unlink()
            have = 0
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if have:
            headers["Range"] = f"bytes={have}-"
        h = hashlib.sha256()
        resumed_at = 0
        try:
            async with self.client.stream("GET", url, headers=headers) as resp:
                if resp.status_code == 206 and _range_start(resp) == have:
                    h = await asyncio.to_thread(_hash_into, part, h)
                    resumed_at, mode = have, "ab"
                elif resp.status_code == 200:
                    have, mode = 0, "wb"
                else:
                    if resp.status_code == 206:
                        # A range that is not the one asked for: start over next time.
                        part.unlink(missing_ok=True)
                    raise CopyFailed(
                        f"{url} answered {resp.status_code}",
                        hint="the peer may have removed it since it listed it; "
                        "the next sync compares again",
                    )
                with part.open(mode) as out:
                    async for chunk in resp.aiter_raw():
                        have += len(chunk)
                        if have > f.size:
                            break
                        h.update(chunk)
                        out.write(chunk)
        except httpx.HTTPError as e:
            raise CopyFailed(
                f"fetching {f.path} from {url} stopped at byte {have}: {e}",
                hint="the next sync resumes it from there",
            ) from e
        got = h.hexdigest()
        if have != f.size or got != f.sha256:
            part.unlink(missing_ok=True)
            if resumed_at:
                # The part kept from an earlier try may be what was wrong: not the peer's
                # fault until a whole fetch says so.
                raise CopyFailed(
                    f"{f.path} resumed at byte {resumed_at} is not the file the peer lists",
                    hint="the next sync fetches it whole",
                )
            raise CopyRefused(
                f"the peer served {f.path} with {have} bytes of sha256 {got[:16]}…, "
                f"not the {f.size} bytes of sha256 {f.sha256[:16]}… its state lists: "
                "the copy was refused and nothing of it kept",
                hint="check that mirror's disk: its copy of that file is not what it was added as",
            )
        return part


def _range_start(resp: httpx.Response) -> int:
    """Where a 206's ``Content-Range: bytes N-M/T`` starts; -1 when it names none."""
    value = resp.headers.get("content-range", "")
    unit, _, rest = value.partition(" ")
    start = rest.partition("-")[0]
    return int(start) if unit == "bytes" and start.isdigit() else -1
