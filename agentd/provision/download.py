"""Streamed downloads checked against a pinned sha256.

A file is fetched into a partial file beside where it will live, resumed with
an HTTP Range request when a partial from an earlier try is there, and only
renamed to its final name once its digest is the one pinned. A file whose
digest differs is deleted: nothing of it is left for an install to pick up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import httpx

from llmgw.errors import LlmgwError
from llmgw.fsutil import sha256_file

log = logging.getLogger(__name__)

# (bytes_done, bytes_total); bytes_total is 0 when the server does not say.
Progress = Callable[[int, int], None]

# 1 MiB: large enough that handing each write to a thread costs nothing
# next to the network, small enough that progress moves smoothly.
CHUNK_BYTES = 1 << 20

# Connecting and each read may take this long; the whole download may take
# as long as it needs (a CUDA build of llama.cpp is hundreds of MB).
TIMEOUT = httpx.Timeout(30.0, read=120.0)

_CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+|\*)")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class DownloadError(LlmgwError):
    """A download could not be completed."""


class ChecksumMismatch(DownloadError):
    """The bytes downloaded are not the ones pinned."""

    def __init__(self, name: str, expected: str, got: str) -> None:
        super().__init__(
            f"{name} does not match its pinned sha256: expected {expected}, got {got}",
            hint="the file was deleted; check the pinned digest or the mirror it came from",
        )
        self.expected = expected
        self.got = got


def partial_path(dest_dir: Path, name: str, sha256: str) -> Path:
    """Where the unfinished download of ``name`` is kept between tries.

    The pinned digest is part of the name, so a partial is only ever resumed
    for the same file it was started for, never spliced onto another version.
    """
    return dest_dir / f".{name}.{sha256[:16]}.part"


async def download(
    url: str,
    dest_dir: Path,
    sha256: str,
    *,
    name: str | None = None,
    progress: Progress | None = None,
    client: httpx.AsyncClient | None = None,
) -> Path:
    """Fetch ``url`` into ``dest_dir/name`` and return that path once it matches ``sha256``.

    Raises DownloadError when the server cannot be reached or refuses, and
    ChecksumMismatch (after deleting the file) when the bytes are not the
    pinned ones.
    """
    sha256 = sha256.strip().lower()
    if not _SHA256.fullmatch(sha256):
        raise DownloadError(f"{sha256!r} is not a sha256 digest (64 hex digits)")
    name = name or url.rstrip("/").rsplit("/", 1)[-1]
    if not name or name.startswith(".") or "/" in name:
        raise DownloadError(f"cannot name a download {name!r} after {url}")
    dest_dir.mkdir(parents=True, exist_ok=True)
    final = dest_dir / name
    part = partial_path(dest_dir, name, sha256)

    if final.exists():
        # A verified file from an earlier try whose install did not finish.
        if await asyncio.to_thread(sha256_file, final) == sha256:
            return final
        final.unlink()

    own_client = client is None
    if client is None:
        client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=True)
    try:
        await _fetch(client, url, part, progress)
    finally:
        if own_client:
            await client.aclose()

    got = await asyncio.to_thread(sha256_file, part)
    if got != sha256:
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(name, sha256, got)
    os.replace(part, final)
    return final


async def _fetch(
    client: httpx.AsyncClient, url: str, part: Path, progress: Progress | None
) -> None:
    """Append the rest of ``url`` to ``part``, or start it over if the server cannot resume."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        async with client.stream("GET", url, headers=headers) as response:
            if response.status_code == 416 and offset:
                # The partial already holds every byte (or is longer than the
                # file now is): let the digest decide rather than refetch.
                log.info("%s: the partial download is already complete", url)
                return
            if response.status_code >= 400:
                raise DownloadError(
                    f"{url} answered {response.status_code} {response.reason_phrase}",
                    hint="check that the release exists on that server",
                )
            offset, total = _start_at(response, offset)
            if offset:
                log.info("%s: resuming at byte %d", url, offset)
            f = await asyncio.to_thread(open, part, "r+b" if offset else "wb")
            with f:
                f.seek(offset)
                f.truncate()
                done = offset
                if progress:
                    progress(done, total)
                async for chunk in response.aiter_bytes(CHUNK_BYTES):
                    await asyncio.to_thread(f.write, chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
                await asyncio.to_thread(os.fsync, f.fileno())
    except httpx.HTTPError as exc:
        # The partial stays: the next try resumes from where this one stopped.
        raise DownloadError(
            f"could not download {url}: {exc or type(exc).__name__}",
            hint="the next try resumes where this one stopped",
        ) from exc


def _start_at(response: httpx.Response, asked: int) -> tuple[int, int]:
    """(offset the body starts at, total size or 0) for a 200 or 206 answer."""
    if response.status_code == 206:
        match = _CONTENT_RANGE.match(response.headers.get("content-range", ""))
        if match and int(match.group(1)) == asked:
            total = match.group(2)
            return asked, int(total) if total.isdigit() else 0
        raise DownloadError(
            f"{response.url} resumed at a byte other than the {asked} asked for",
        )
    # A 200 is the whole file, whatever was asked: start over.
    length = response.headers.get("content-length", "")
    return 0, int(length) if length.isdigit() else 0
