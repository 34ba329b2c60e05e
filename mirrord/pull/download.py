"""One file fetched into the mirror's incoming folder: resumed after a cut, checked at the end.

The partial file is named by the digest the upstream gives for it (an LFS
file's sha256, a small file's git blob id), so a pull that failed and the
next add of the same thing, or two pulls sharing a blob, meet at the same
bytes. A cut connection is resumed with ``Range: bytes=N-`` (206 appends; a
200 means the server sent it all again, so the file starts over). Bytes that
do not match the digest are fetched once more from the start, then refused:
a mirror never holds what its upstream did not list.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from mirrord.pull.errors import DigestMismatch, PullInvalid, UpstreamFailed

log = logging.getLogger(__name__)

# Bytes gathered before one write (and hash) in a thread: few thread hops, little memory.
WRITE_BYTES = 4 << 20
# A transport error (a cut, a reset) is resumed this many times in a row with no byte
# coming between, waiting longer each time.
RETRIES = 3
BACKOFF_S = 0.5
# A file whose bytes do not match is fetched this many times in all.
ATTEMPTS = 2


class _Busy(Exception):
    """The upstream answered 5xx: tried again like a cut, then reported."""


@dataclass(frozen=True)
class Wanted:
    """A file to fetch and what it must be: its size and the digest the upstream lists."""

    url: str
    # Partial files are named by this (sha256 or git blob id).
    key: str
    size: int | None = None
    sha256: str = ""
    git_oid: str = ""
    # For messages: repo/path or the URL's file name.
    name: str = ""


class _Hashes:
    """sha256 of the bytes, and their git blob id when the size is known up front."""

    def __init__(self, size: int | None, with_git: bool) -> None:
        self.sha256 = hashlib.sha256()
        self.git = hashlib.sha1(b"blob %d\x00" % size) if with_git and size is not None else None

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self.sha256.update(data)
        if self.git is not None:
            self.git.update(data)


def _append(path: Path, chunks: list[bytes], hashes: _Hashes) -> int:
    """Write and hash the chunks (in a thread); the bytes written."""
    n = 0
    with open(path, "ab") as f:
        for chunk in chunks:
            f.write(chunk)
            hashes.update(chunk)
            n += len(chunk)
    return n


def _rehash(path: Path, hashes: _Hashes) -> int:
    """Hash what a partial file holds already; its length."""
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(WRITE_BYTES):
            hashes.update(chunk)
            n += len(chunk)
    return n


class Downloader:
    """Fetches Wanted files into ``incoming_dir`` with ``client``, one lock per digest."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        incoming_dir: Path,
        *,
        retries: int = RETRIES,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self.client = client
        self.incoming_dir = Path(incoming_dir)
        self.retries = retries
        self.backoff_s = backoff_s
        # Two pulls sharing a blob write one partial file, one after the other.
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def partial_path(self, key: str) -> Path:
        return self.incoming_dir / f"pull-{key}"

    async def fetch(
        self,
        want: Wanted,
        *,
        headers: dict[str, str] | None = None,
        on_bytes: Callable[[int], None] = lambda n: None,
        held: Callable[[], str] = lambda: "",
    ) -> tuple[Path | None, str]:
        """The verified file (still in incoming/) and its sha256.

        ``held`` is asked once the digest's lock is taken: a sha256 it gives
        (another pull brought the blob in meanwhile) is returned with no path.
        """
        lock, users = self._locks.get(want.key, (asyncio.Lock(), 0))
        self._locks[want.key] = (lock, users + 1)
        try:
            async with lock:
                if sha := held():
                    return None, sha
                return await self._fetch_checked(want, headers or {}, on_bytes)
        finally:
            lock, users = self._locks[want.key]
            if users > 1:
                self._locks[want.key] = (lock, users - 1)
            else:
                del self._locks[want.key]

    async def _fetch_checked(self, want, headers, on_bytes) -> tuple[Path, str]:
        path = self.partial_path(want.key)
        got = ("", "")
        for attempt in range(ATTEMPTS):
            hashes, size = await self._fetch_resumed(want, path, headers, on_bytes)
            sha = hashes.sha256.hexdigest()
            git = hashes.git.hexdigest() if hashes.git is not None else ""
            size_ok = want.size is None or size == want.size
            if (
                size_ok
                and (not want.sha256 or sha == want.sha256)
                and (not want.git_oid or git == want.git_oid)
            ):
                return path, sha
            got = (sha, git) if size_ok else (f"{size} bytes", "")
            log.warning(
                "%s does not match its digest (attempt %d of %d); fetching it again",
                want.name,
                attempt + 1,
                ATTEMPTS,
            )
            path.unlink(missing_ok=True)
            on_bytes(-size)
        raise DigestMismatch(_mismatch(want, *got), hint=_MISMATCH_HINT)

    async def _fetch_resumed(self, want, path: Path, headers, on_bytes) -> tuple[_Hashes, int]:
        """Bring ``path`` to the whole file, resuming from what it holds; its hashes and size."""
        hashes = _Hashes(want.size, bool(want.git_oid))
        have = await asyncio.to_thread(_rehash, path, hashes) if path.exists() else 0
        on_bytes(have)
        if want.size is not None and have > want.size:
            path.unlink()
            on_bytes(-have)
            hashes, have = _Hashes(want.size, bool(want.git_oid)), 0
        # Cuts in a row with no byte between: a link that moves on at each try goes on.
        cuts = 0
        while want.size is None or have < want.size:
            had = have
            # Chunks gathered for one write in a thread, and their length.
            buf: list[bytes] = []
            buffered = 0
            try:
                async with self._stream(want, have, headers) as resp:
                    if resp.status_code == 416 and have:
                        # What we hold is not a start of the file: begin again.
                        path.unlink(missing_ok=True)
                        on_bytes(-have)
                        hashes, have = _Hashes(want.size, bool(want.git_oid)), 0
                        continue
                    _raise_for(resp, want)
                    if have and resp.status_code != 206:
                        log.info("%s: the server sent the whole file again", want.name)
                        path.unlink(missing_ok=True)
                        on_bytes(-have)
                        hashes, have = _Hashes(want.size, bool(want.git_oid)), 0
                    elif have and not _starts_at(resp, have):
                        raise PullInvalid(
                            f"{want.name}: asked for bytes from {have}, the server answered "
                            f"{resp.headers.get('content-range', '?')}"
                        )
                    async for chunk in resp.aiter_bytes():
                        buf.append(chunk)
                        buffered += len(chunk)
                        on_bytes(len(chunk))
                        if buffered >= WRITE_BYTES:
                            have += await asyncio.to_thread(_append, path, buf, hashes)
                            buf, buffered = [], 0
                        if want.size is not None and have + buffered > want.size:
                            break  # longer than listed: the check refuses it
                    if buf:
                        have += await asyncio.to_thread(_append, path, buf, hashes)
                        buf, buffered = [], 0
                    if want.size is None or have >= want.size:
                        break
                    raise httpx.ReadError("the answer ended before the file did")
            except (httpx.TransportError, _Busy) as e:
                if buf:  # what came before the cut is good: keep it
                    have += await asyncio.to_thread(_append, path, buf, hashes)
                cuts = 1 if have > had else cuts + 1
                if cuts > self.retries:
                    raise UpstreamFailed(
                        f"{want.name}: the download broke {cuts} times in a row, "
                        f"last: {str(e) or type(e).__name__} ({have} bytes kept)",
                        hint="add it again to resume from the bytes held, once the upstream "
                        "answers",
                    ) from e
                log.info("%s: cut at %d bytes (%s); resuming", want.name, have, e)
                await asyncio.sleep(self.backoff_s * cuts)
        if not path.exists():
            path.touch()  # an empty file
        return hashes, have

    def _stream(self, want: Wanted, have: int, headers: dict[str, str]):
        h = {**headers, "Accept-Encoding": "identity"}
        if have:
            h["Range"] = f"bytes={have}-"
        return self.client.stream("GET", want.url, headers=h)


def _starts_at(resp: httpx.Response, have: int) -> bool:
    rng = resp.headers.get("content-range", "")
    # "bytes N-M/T"
    first = rng.removeprefix("bytes ").split("-", 1)[0]
    return first.isdigit() and int(first) == have


def _raise_for(resp: httpx.Response, want: Wanted) -> None:
    if resp.status_code < 400:
        return
    code = resp.headers.get("x-error-code", "")
    if resp.status_code == 404:
        raise UpstreamFailed(
            f"{want.name}: the upstream has no such file ({code or 404})",
            hint="check the source; a mirror pulled from must hold it",
            code="not_found",
        )
    if resp.status_code in (401, 403):
        raise UpstreamFailed(
            f"{want.name}: the upstream refused the download ({resp.status_code})",
            hint="give a token that may read it (upstream_token_file in mirror.yaml)",
            code="refused",
        )
    if resp.status_code >= 500:
        raise _Busy(f"the upstream answered {resp.status_code}")
    raise UpstreamFailed(
        f"{want.name}: the upstream answered {resp.status_code}",
        hint="check the source and the token given for it",
    )


_MISMATCH_HINT = (
    "nothing of it was kept; the upstream (or something between) changed the bytes: "
    "try again later or pull from another mirror"
)


def _mismatch(want: Wanted, got_sha: str, got_git: str) -> str:
    if want.size is not None and got_sha.endswith(" bytes"):
        return f"{want.name}: fetched twice, {got_sha} each time where {want.size} were listed"
    if want.sha256:
        return (
            f"{want.name}: fetched twice, its sha256 was {got_sha} where {want.sha256} was expected"
        )
    return (
        f"{want.name}: fetched twice, its git blob id was {got_git} where the upstream "
        f"lists {want.git_oid}"
    )
