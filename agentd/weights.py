"""Model weights on a node: fetched once into the cache, checked, and found again.

    <agent_data_dir>/weights/<model>/<file>            the weights, complete
    <agent_data_dir>/weights/<model>/.<file>.json      what was fetched: source, size, sha256
    <agent_data_dir>/weights/<model>/.<file>.partial   a download in progress (resumed with Range)

``file`` sources are used where they are, never copied. ``https`` and ``hf``
sources are streamed to the partial file, hashed on the way, and renamed into
place only when whole and, where the model pins one, matching its sha256.

Weights in a Python pickle format (.bin, .pt, .pth, .ckpt, ...) run whatever
code they hold when an engine loads them: a poisoned upload on a model hub is
a program run on the node. They are refused before a byte is fetched unless
the model says ``allow_pickle: true``, on purpose.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from llmgw.catalog.model import PICKLE_HINT, Model, ModelSource, is_pickled
from llmgw.errors import LlmgwError
from llmgw.fsutil import write_atomic

log = logging.getLogger(__name__)

HF_BASE_URL = "https://huggingface.co"
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

# bytes_done, bytes_total (0 while the total is not known)
ProgressCallback = Callable[[int, int], None]


class WeightsError(LlmgwError):
    """Weights that could not be fetched or found, or were refused."""


class PickleRefused(WeightsError):
    """Weights in a pickle format, on a model without allow_pickle."""


class UnsafeName(WeightsError):
    """A model or file name that would not be one plain path element."""


class ChecksumMismatch(WeightsError):
    """Weights whose sha256 is not the one the model pins."""


class DownloadFailed(WeightsError):
    """A download that the server refused or the network cut, after retries."""


class WeightsMissing(WeightsError):
    """A local source that is not there."""


@dataclass(frozen=True)
class Weights:
    """Weights ready for an engine."""

    path: Path
    size_bytes: int
    # "" for a directory, and for a local file with no pinned sha256.
    sha256: str
    # True when this call downloaded bytes; False for a cache hit or a local source.
    downloaded: bool


def check_name(name: str, what: str) -> str:
    """``name`` if it is one path element not starting with a dot, else UnsafeName."""
    if not name or name.startswith(".") or "/" in name or "\\" in name or "\x00" in name:
        raise UnsafeName(
            f"{what} {name!r} is refused: names from outside must be one path element "
            "not starting with a dot",
            hint="rename it, or give a source whose file name is plain",
        )
    return name


def redact(url: str) -> str:
    """A URL fit for a log line or an error: no user:password, no query (tokens live there)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def hf_url(source: ModelSource, base_url: str = HF_BASE_URL) -> str:
    """The download URL of an hf: source, on huggingface.co or a mirror laid out like it."""
    for part in [*source.location.split("/"), *source.file.split("/")]:
        check_name(part, "the Hugging Face name part")
    repo = "/".join(quote(p, safe="") for p in source.location.split("/"))
    file = "/".join(quote(p, safe="") for p in source.file.split("/"))
    revision = quote(source.revision or "main", safe="")
    return f"{base_url.rstrip('/')}/{repo}/resolve/{revision}/{file}"


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in chunks (call it through asyncio.to_thread)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def refuse_pickles(source: ModelSource, allow_pickle: bool) -> None:
    """Raise PickleRefused for a pickle source, unless the model allows it."""
    name = source.file if source.kind == "hf" else source.location
    if allow_pickle or not is_pickled(name):
        return
    shown = redact(name) if source.kind == "https" else name
    raise PickleRefused(
        f"{shown} is in a pickle format, which runs code when an engine loads it; it is refused",
        hint=f"use the model's safetensors or GGUF, or {PICKLE_HINT}",
    )


class WeightsFetcher:
    """Fetches and finds model weights in one node's cache directory."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        hf_base_url: str = HF_BASE_URL,
        client: httpx.AsyncClient | None = None,
        retries: int = RETRIES,
        retry_backoff_s: float = RETRY_BACKOFF_S,
        progress_every_s: float = PROGRESS_EVERY_S,
    ) -> None:
        self.cache_dir = Path(cache_dir)
        self.hf_base_url = hf_base_url
        self._client = client
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.progress_every_s = progress_every_s
        # Two shards of one model on a node share one download.
        self._locks: dict[Path, asyncio.Lock] = {}

    async def ensure_model(
        self, model: Model, on_progress: ProgressCallback | None = None
    ) -> Weights:
        """The weights of a catalog model, fetched if they are not here yet."""
        return await self.ensure(
            model.name,
            model.parsed_source,
            sha256=model.sha256,
            allow_pickle=model.allow_pickle,
            on_progress=on_progress,
        )

    async def ensure(
        self,
        model: str,
        source: ModelSource | str,
        *,
        sha256: str = "",
        allow_pickle: bool = False,
        mirror_url: str = "",
        on_progress: ProgressCallback | None = None,
    ) -> Weights:
        """The weights of ``model`` from ``source``, ready on this node.

        ``mirror_url`` replaces huggingface.co for hf: sources (a mirror laid
        out like it). Raises a WeightsError subclass in plain words.
        """
        if isinstance(source, str):
            try:
                source = ModelSource.parse(source)
            except ValueError as e:
                raise WeightsError(f"the weights source is not usable: {e}") from e
        check_name(model, "the model name")
        sha256 = sha256.lower()
        # Before anything touches the network or the disk.
        refuse_pickles(source, allow_pickle)
        if source.kind == "file":
            return await self._local(model, Path(source.location), sha256, allow_pickle)
        file = check_name(source.file_name, "the file name")
        if source.kind == "hf":
            url = hf_url(source, mirror_url or self.hf_base_url)
        else:
            url = source.location
        dest = self.cache_dir / model / file
        lock = self._locks.setdefault(dest, asyncio.Lock())
        # Recorded on disk beside the file: a URL's query (tokens live there) is left out.
        key = redact(source.location) if source.kind == "https" else str(source)
        async with lock:
            cached = self._cached(dest, key, sha256)
            if cached is not None:
                return cached
            return await self._download(url, dest, key, sha256, on_progress)

    # --- local sources --------------------------------------------------------

    async def _local(self, model: str, path: Path, sha256: str, allow_pickle: bool) -> Weights:
        if not path.exists():
            raise WeightsMissing(
                f"{path} does not exist on this node",
                hint="copy the weights there, or give an https: or hf: source",
            )
        if path.is_dir():
            if sha256:
                raise WeightsError(
                    f"{path} is a directory; a sha256 pins one file",
                    hint="remove sha256 from the model, or point it at the file",
                )
            if not allow_pickle:
                found = next((p for p in sorted(path.rglob("*")) if is_pickled(p.name)), None)
                if found is not None:
                    raise PickleRefused(
                        f"{path} holds {found.relative_to(path)}, in a pickle format, which runs "
                        "code when an engine loads it; the directory is refused",
                        hint=f"remove the pickle files, or {PICKLE_HINT}",
                    )
            return Weights(path, 0, "", downloaded=False)
        size = path.stat().st_size
        if sha256:
            got = await self._local_sha(model, path)
            if got != sha256:
                raise ChecksumMismatch(
                    f"{path} has sha256 {got}, not the {sha256} the model pins",
                    hint="check the file, or correct the model's sha256",
                )
        return Weights(path, size, sha256, downloaded=False)

    async def _local_sha(self, model: str, path: Path) -> str:
        """The sha256 of a local file, remembered while its size and mtime stay the same.

        Hashing 100 GB takes minutes; a restart should not pay that again.
        """
        st = path.stat()
        memo = self.cache_dir / model / ".local.json"
        key = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        seen = _read_json(memo)
        if seen and all(seen.get(k) == v for k, v in key.items()) and seen.get("sha256"):
            return seen["sha256"]
        digest = await asyncio.to_thread(sha256_file, path)
        write_atomic(memo, json.dumps({**key, "sha256": digest}))
        return digest

    # --- the cache ------------------------------------------------------------

    @staticmethod
    def _record(dest: Path) -> Path:
        return dest.with_name(f".{dest.name}.json")

    @staticmethod
    def _partial(dest: Path) -> Path:
        return dest.with_name(f".{dest.name}.partial")

    def _cached(self, dest: Path, source: str, sha256: str) -> Weights | None:
        """The cached file if it is whole and what the model asks for, else None."""
        rec = _read_json(self._record(dest))
        if not rec or rec.get("source") != source or not dest.is_file():
            return None
        if dest.stat().st_size != rec.get("size") or (sha256 and rec.get("sha256") != sha256):
            return None
        return Weights(dest, rec["size"], rec.get("sha256", ""), downloaded=False)

    # --- downloads ------------------------------------------------------------

    async def _download(
        self, url: str, dest: Path, source: str, sha256: str, on_progress: ProgressCallback | None
    ) -> Weights:
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = self._partial(dest)
        meta_path = partial.with_name(partial.name + ".json")
        meta = _read_json(meta_path) or {}
        if meta.get("source") != source:
            # A partial file of another source (the model was changed): resuming
            # it would splice two files together.
            partial.unlink(missing_ok=True)
            meta = {"source": source}
        state = _Hashing()
        client = self._client or httpx.AsyncClient(
            follow_redirects=True, timeout=httpx.Timeout(CONNECT_READ_TIMEOUT_S)
        )
        try:
            for attempt in range(self.retries + 1):
                try:
                    total = await self._fetch_once(
                        client, url, partial, meta, meta_path, state, on_progress
                    )
                    break
                except (httpx.TransportError, _Cut) as e:
                    if attempt == self.retries:
                        raise DownloadFailed(
                            f"downloading {redact(url)} failed: {_reason(e)}",
                            hint="check the node's network or the mirror; "
                            "starting the shard again resumes where it stopped",
                        ) from e
                    log.info("download of %s cut (%s); resuming", redact(url), _reason(e))
                    await asyncio.sleep(self.retry_backoff_s * (attempt + 1))
        finally:
            if self._client is None:
                await client.aclose()
        digest = state.hasher.hexdigest()
        if sha256 and digest != sha256:
            partial.unlink(missing_ok=True)
            meta_path.unlink(missing_ok=True)
            raise ChecksumMismatch(
                f"{redact(url)} has sha256 {digest}, not the {sha256} the model pins; "
                "the download was removed",
                hint="check the source, or correct the model's sha256",
            )
        os.replace(partial, dest)
        meta_path.unlink(missing_ok=True)
        write_atomic(
            self._record(dest),
            json.dumps(
                {
                    "source": source,
                    "size": total,
                    "sha256": digest,
                    "fetched_unix": int(time.time()),
                }
            ),
        )
        return Weights(dest, total, digest, downloaded=True)

    async def _fetch_once(
        self,
        client: httpx.AsyncClient,
        url: str,
        partial: Path,
        meta: dict,
        meta_path: Path,
        state: _Hashing,
        on_progress: ProgressCallback | None,
    ) -> int:
        """Fetch the rest of ``url`` into ``partial``; its whole size once complete."""
        have = partial.stat().st_size if partial.exists() else 0
        headers = {}
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
                raise DownloadFailed(
                    f"{redact(url)} answered {resp.status_code} {resp.reason_phrase}",
                    hint=_status_hint(resp.status_code),
                )
            if resp.status_code == 200:
                have = 0  # the server sent it all from the start
                meta["etag"] = resp.headers.get("etag", "")
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
