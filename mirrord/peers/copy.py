"""Copying one revision from a peer: every file not held fetched, checked against its digest, held.

Model files come through the peer's Hugging Face API at the exact commit
(``/{repo}/resolve/{commit}/{path}``), wheels and engine archives from
``/blobs/sha256/{sha256}``, fetched as a pull fetches (mirrord/pull/download.py):
into the store's incoming folder under ``pull-<sha256>``, resumed with ``Range``
after a cut (206 appends, 200 starts over), fetched whole once more when the
bytes are not the digest, then refused. The copy is held only when every file's
sha256 and size are what the peer's State says: the blobs are adopted and
the revision put in one step, with nothing awaited between, so a removal's
collection of unreferenced blobs cannot run in the middle.
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

import httpx

from llmgw.errors import LlmgwError
from llmgw.mirror.names import SHA256_RE, check_file_path
from llmgw.mirror.wire import FileEntry, Revision
from mirrord.peers.plan import Copy
from mirrord.pull.download import Downloader, Wanted
from mirrord.pull.errors import DigestMismatch, PullError, UpstreamFailed
from mirrord.store import Incomplete, MirrorStore

log = logging.getLogger(__name__)


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


class PeerCopier:
    def __init__(self, store: MirrorStore, client: httpx.AsyncClient) -> None:
        self.store = store
        self.client = client
        # The pull's fetch: the same partial files (named by digest, so a pull and a
        # copy of one blob meet at the same bytes), resume, retries and checks.
        self.downloader = Downloader(client, store.incoming_dir)

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
                    part = await self._fetch(self._url(peer_url, rev, f), token, f)
                    if part is not None:
                        parts[sha] = part
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

    async def _fetch(self, url: str, token: str, f: FileEntry) -> Path | None:
        """The file at ``url`` in incoming/, checked to be ``f``'s bytes (None: held meanwhile)."""
        want = Wanted(url=url, key=f.sha256, size=f.size, sha256=f.sha256, name=f.path)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            part, _ = await self.downloader.fetch(
                want,
                headers=headers,
                held=lambda: f.sha256 if self.store.has_blob(f.sha256) else "",
            )
        except DigestMismatch as e:
            # Fetched whole twice and still not what the peer's State lists.
            raise CopyRefused(
                f"the peer served {f.path} as other bytes than the {f.size} bytes of sha256 "
                f"{f.sha256[:16]}… its state lists ({e.message}): the copy was refused and "
                "nothing of it kept",
                hint="check that mirror's disk: its copy of that file is not what it was added as",
            ) from e
        except (UpstreamFailed, PullError) as e:
            raise CopyFailed(
                f"fetching {f.path} from {url}: {e.message}",
                hint="the next sync resumes it from the bytes held",
            ) from e
        except httpx.HTTPError as e:
            raise CopyFailed(
                f"fetching {f.path} from {url} stopped: {e}",
                hint="the next sync resumes it from the bytes held",
            ) from e
        return part
