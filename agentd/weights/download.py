"""One file fetched over HTTP into place: resumed after a cut, hashed on the way, checked.

    <dir>/.<file>.partial          the bytes so far (resumed with Range: bytes=N-)
    <dir>/.<file>.partial.json     what they are of: the source and the server's ETag
    <dir>/<file>                   renamed into place only when whole and as expected

If-Range carries the ETag the download began with: a file that changed on the
server since the cut is sent whole (200), never spliced onto the old bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import httpx

from agentd.weights.errors import ChecksumMismatch, DownloadFailed, redact
from agentd.weights.sources import DOWN, LACKS, OTHER, REFUSED, Failure, Origin, none_gave
from llmgw.fsutil import write_atomic

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
# A node's progress becomes a ShardStatus on the agent stream: twice a second
# is live enough for a console and quiet enough for a 100 GB download.
PROGRESS_EVERY_S = 0.5
# Cuts are common on long downloads; each retry resumes where the last stopped.
RETRIES = 3
RETRY_BACKOFF_S = 1.0
# Per connect and per read: a mirror that sends nothing for this long is cut
# and resumed, while a slow but moving download runs as long as it needs.
CONNECT_READ_TIMEOUT_S = 30.0

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_SHA1_RE = re.compile(r"[0-9a-f]{40}")

# bytes_done, bytes_total (0 while the total is not known)
ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class Expect:
    """What a download must turn out to be; empty fields are not checked."""

    sha256: str = ""
    # The git blob id the hub lists for a small file (sha1 of "blob N\\0" + bytes).
    git_oid: str = ""
    size: int = 0
    # Who says so, for the error: "the model pins", "the hub lists".
    who: str = "the model pins"
    # Where nothing else is expected, check the bytes against the ETag they
    # came with when a cluster mirror gave it (an LFS file's sha256 or a
    # small file's git blob id, the same on every mirror). The hub's own is
    # not trusted for this: its files redirect to CDNs with ETags of their own.
    etag_names_bytes: bool = False


def git_blob_oid_file(path: Path) -> str:
    """The git blob id of a file, as the hub lists small files (call it through to_thread)."""
    h = hashlib.sha1(b"blob %d\x00" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def partial_path(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.partial")


class Downloader:
    """Fetches URLs into files with resume, retries, failover between origins, and checks."""

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        retries: int = RETRIES,
        retry_backoff_s: float = RETRY_BACKOFF_S,
        progress_every_s: float = PROGRESS_EVERY_S,
        timeout_s: float = CONNECT_READ_TIMEOUT_S,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self._client = client
        # TLS for a client of our own: the cluster's CA beside the public ones (sources.mirror_tls).
        self.verify = verify
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.progress_every_s = progress_every_s
        self.timeout_s = timeout_s

    async def fetch(
        self,
        origins: str | Sequence[Origin],
        dest: Path,
        *,
        source: str,
        expect: Expect = Expect(),
        on_progress: ProgressCallback | None = None,
        fetch_again_on_mismatch: bool = False,
        on_origin: Callable[[Origin], None] | None = None,
        on_failed: Callable[[Origin], None] | None = None,
    ) -> tuple[int, str]:
        """Fetch ``origins`` (a URL, or the places holding the file, in order) to ``dest``.

        Returns (size, sha256) once it is in place and as expected. ``source``
        names what the bytes are of, so a partial file of another source is
        never resumed. A cut, a 5xx or a stall continues from the next origin
        at the byte reached; an origin answering 404 or 401/403 is passed over
        for this file. ``on_origin`` hears each origin as the bytes start to
        come from it, ``on_failed`` each one that failed mid-way. A download
        that is not what ``expect`` says is removed; with
        ``fetch_again_on_mismatch`` it is fetched once more from the first
        byte before it is refused (a byte flipped on the way).
        """
        order = [Origin.plain(origins)] if isinstance(origins, str) else list(origins)
        shown = redact(order[0].url) if _one_plain(order) else source
        rounds = 2 if fetch_again_on_mismatch else 1
        for round_ in range(rounds):
            total, digest, etag = await self._fetch_resuming(
                order, dest, source, on_progress, on_origin, on_failed
            )
            partial = partial_path(dest)
            problem = await self._problem(partial, total, digest, _with_etag(expect, etag))
            if not problem:
                os.replace(partial, dest)
                _meta_path(partial).unlink(missing_ok=True)
                return total, digest
            partial.unlink(missing_ok=True)
            _meta_path(partial).unlink(missing_ok=True)
            if round_ + 1 < rounds:
                log.warning("%s: %s; fetching it again", shown, problem)
                continue
            again = " (twice)" if rounds > 1 else ""
            raise ChecksumMismatch(
                f"{shown} {problem}{again}; the download was removed",
                hint="check the source, or correct the model's sha256"
                if expect.who == "the model pins"
                else "the hub or a mirror on the way serves damaged bytes; try another mirror",
            )
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _problem(self, partial: Path, total: int, digest: str, expect: Expect) -> str:
        if expect.size and total != expect.size:
            return f"has {total} bytes, not the {expect.size} {expect.who}"
        if expect.sha256 and digest != expect.sha256:
            return f"has sha256 {digest}, not the {expect.sha256} {expect.who}"
        if expect.git_oid:
            oid = await asyncio.to_thread(git_blob_oid_file, partial)
            if oid != expect.git_oid:
                return f"has git id {oid}, not the {expect.git_oid} {expect.who}"
        return ""

    async def _fetch_resuming(
        self,
        order: list[Origin],
        dest: Path,
        source: str,
        on_progress: ProgressCallback | None,
        on_origin: Callable[[Origin], None] | None,
        on_failed: Callable[[Origin], None] | None,
    ) -> tuple[int, str, str]:
        """(size, sha256, the ETag that names the bytes or "") once the whole file has arrived."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = partial_path(dest)
        meta_path = _meta_path(partial)
        meta = _read_json(meta_path) or {}
        if meta.get("source") != source:
            # A partial file of another source (the model was changed): resuming
            # it would splice two files together.
            partial.unlink(missing_ok=True)
            meta = {"source": source}
        state = _Hashing()
        client = self._client or httpx.AsyncClient(
            follow_redirects=True, timeout=httpx.Timeout(self.timeout_s), verify=self.verify
        )
        # Each origin gets the retries a single URL always had; a cut on one
        # moves on to the next at once, and only a whole round of failures waits.
        budget = (self.retries + 1) * len(order)
        # One URL that is not a cluster mirror fails with its own words, as it always did.
        plain = _one_plain(order)
        failures: dict[int, Failure] = {}
        passed_over: set[int] = set()
        i, tries = 0, 0
        try:
            while True:
                o = order[i]
                if on_origin:
                    on_origin(o)
                try:
                    total = await self._fetch_once(
                        client, o, partial, meta, meta_path, state, on_progress
                    )
                    named = meta.get("etag", "") if meta.get("etag_names_bytes") else ""
                    return total, state.hasher.hexdigest(), named
                except _PassOver as e:
                    passed_over.add(i)
                    failures[i] = Failure(o.label, e.kind, e.message)
                    if plain:
                        raise DownloadFailed(e.message, hint=e.hint) from None
                except (httpx.TransportError, _Cut) as e:
                    tries += 1
                    failures[i] = Failure(o.label, DOWN, _reason(e))
                    if plain and tries >= budget:
                        raise DownloadFailed(
                            f"downloading {redact(o.url)} failed: {_reason(e)}",
                            hint="check the node's network or the mirror; "
                            "starting the shard again resumes where it stopped",
                        ) from e
                    if on_failed:
                        on_failed(o)
                left = [k for k in range(len(order)) if k not in passed_over]
                if not left or tries >= budget:
                    raise none_gave(source, [failures[k] for k in sorted(failures)])
                nxt = next((k for k in left if k > i), left[0])
                have = partial.stat().st_size if partial.exists() else 0
                log.info(
                    "download of %s from %s stopped (%s); going on from %s at byte %d",
                    source,
                    o.label,
                    failures[i].reason,
                    order[nxt].label,
                    have,
                )
                if nxt <= i:  # round the list: every origin left failed once more
                    await asyncio.sleep(self.retry_backoff_s * max(tries // len(left), 1))
                i = nxt
        finally:
            if self._client is None:
                await client.aclose()

    async def _fetch_once(
        self,
        client: httpx.AsyncClient,
        origin: Origin,
        partial: Path,
        meta: dict,
        meta_path: Path,
        state: _Hashing,
        on_progress: ProgressCallback | None,
    ) -> int:
        """Fetch the rest of the file from ``origin`` into ``partial``; its size once complete."""
        url = origin.url
        have = partial.stat().st_size if partial.exists() else 0
        headers = {**origin.headers, "Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
            # If-Range: the rest only if the file is still the one begun, else all of it.
            if meta.get("etag") and not meta["etag"].startswith("W/"):
                headers["If-Range"] = meta["etag"]
        async with client.stream("GET", url, headers=headers) as resp:
            if resp.status_code == 416 and have:
                _, _, size = resp.headers.get("content-range", "").partition("/")
                if size.isdigit() and int(size) == have:  # whole already; stopped before the rename
                    await state.catch_up(partial, have)
                    return have
                partial.unlink()
                raise _Cut("the partial download did not match the file; starting again")
            if resp.status_code >= 500:
                raise _Cut(f"{redact(url)} answered {resp.status_code} {resp.reason_phrase}")
            if resp.status_code not in (200, 206):
                raise _PassOver.of(resp, origin)
            if resp.status_code == 206 and _range_start(resp) != have:
                # Bytes from elsewhere in the file would be spliced in at the wrong place.
                raise _PassOver(
                    OTHER,
                    f"{redact(url)} answered a range other than the bytes from {have}",
                    "use a server that honours Range requests",
                )
            if resp.status_code == 200:
                have = 0  # the server sent it all from the start
                meta["etag"] = resp.headers.get("etag", "")
                meta["etag_names_bytes"] = origin.place is not None and origin.place.cluster
                write_atomic(meta_path, json.dumps(meta))
            await state.catch_up(partial, have)
            total = _total_size(resp, have)
            done, last = have, 0.0
            # Disk writes go through a thread: a slow disk must not stall the
            # agent's stream to the control plane, which shares this loop.
            # Bytes are gathered into CHUNK_BYTES writes, and what has arrived
            # is written even when the connection is cut: a resume starts there.
            f = await asyncio.to_thread(open, partial, "ab" if have else "wb")
            buf = bytearray()
            try:
                if on_progress:
                    on_progress(done, total)
                async for chunk in resp.aiter_bytes():
                    buf += chunk
                    if len(buf) >= CHUNK_BYTES:
                        await asyncio.to_thread(f.write, bytes(buf))
                        buf.clear()
                    state.update(chunk)
                    done += len(chunk)
                    now = time.monotonic()
                    if on_progress and now - last >= self.progress_every_s:
                        on_progress(done, total)
                        last = now
            finally:
                await asyncio.to_thread(_flush_close, f, bytes(buf))
        if total and done != total:
            raise _Cut(f"the connection closed at {done} of {total} bytes")
        if on_progress:
            on_progress(done, total or done)
        return done


def _with_etag(expect: Expect, etag: str) -> Expect:
    """``expect``, with the ETag's digest where it names the bytes and nothing else is pinned."""
    if not expect.etag_names_bytes or expect.sha256 or expect.git_oid:
        return expect
    tag = etag.removeprefix("W/").strip('"').lower()
    if _SHA256_RE.fullmatch(tag):
        return replace(expect, sha256=tag, who="its ETag names")
    if _SHA1_RE.fullmatch(tag):
        return replace(expect, git_oid=tag, who="its ETag names")
    return expect


def _one_plain(order: list[Origin]) -> bool:
    return len(order) == 1 and not (order[0].place is not None and order[0].place.is_mirror)


class _PassOver(Exception):
    """An origin that will not give this file (404, 401/403, ...): the next one is asked."""

    def __init__(self, kind: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.kind, self.message, self.hint = kind, message, hint

    @classmethod
    def of(cls, resp: httpx.Response, origin: Origin) -> _PassOver:
        status = resp.status_code
        said = f"{redact(origin.url)} answered {status} {resp.reason_phrase}"
        code = resp.headers.get("x-error-code", "")
        if code:
            said += f" ({code})"
        if status in (404, 410):
            return cls(LACKS, said, _status_hint(status))
        if status in (401, 403):
            if origin.headers:
                return cls(REFUSED, said, "the mirror does not take the node's mirror token")
            return cls(REFUSED, said, _status_hint(status))
        return cls(OTHER, said, _status_hint(status))


def _range_start(resp: httpx.Response) -> int:
    """The first byte a 206 carries (Content-Range: bytes 100-999/1000), -1 if unsaid."""
    first = resp.headers.get("content-range", "").removeprefix("bytes ").partition("-")[0]
    return int(first) if first.strip().isdigit() else -1


def _meta_path(partial: Path) -> Path:
    return partial.with_name(partial.name + ".json")


def _flush_close(f: BinaryIO, rest: bytes) -> None:
    try:
        f.write(rest)
        f.flush()
        os.fsync(f.fileno())
    finally:
        f.close()


class _Hashing:
    """The sha256 of a download, fed as bytes arrive, so the file is never read twice."""

    def __init__(self) -> None:
        self.hasher = hashlib.sha256()
        self.hashed = 0

    async def catch_up(self, partial: Path, have: int) -> None:
        """Make the hash cover the first ``have`` bytes already on disk."""
        if self.hashed != have:
            self.hasher = await asyncio.to_thread(_sha256_prefix, partial, have)
            self.hashed = have

    def update(self, chunk: bytes) -> None:
        self.hasher.update(chunk)
        self.hashed += len(chunk)


def _sha256_prefix(path: Path, size: int) -> hashlib._Hash:
    h = hashlib.sha256()
    if size:
        with open(path, "rb") as f:
            while size > 0 and (chunk := f.read(min(CHUNK_BYTES, size))):
                h.update(chunk)
                size -= len(chunk)
    return h


class _Cut(Exception):
    """A download that stopped early and can be resumed."""


def _total_size(resp: httpx.Response, have: int) -> int:
    if resp.status_code == 206:
        # Content-Range: bytes 100-999/1000
        _, _, total = resp.headers.get("content-range", "").partition("/")
        if total.isdigit():
            return int(total)
    length = resp.headers.get("content-length", "")
    return int(length) + (have if resp.status_code == 206 else 0) if length.isdigit() else 0


def _status_hint(status: int) -> str:
    if status in (401, 403):
        return "the source needs a login or is gated; mirror the file or give a source that is open"
    if status == 404:
        return "check the repository, revision and file name"
    return "try again later, or use a mirror"


def _reason(e: BaseException) -> str:
    return str(e) or type(e).__name__


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


read_json = _read_json
