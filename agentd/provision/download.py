"""Streamed downloads checked against a pinned sha256.

A file is fetched into a partial file beside where it will live, resumed with
an HTTP Range request when a partial from an earlier try is there, and only
renamed to its final name once its digest is the one pinned. A file whose
digest differs is deleted: nothing of it is left for an install to pick up.

With the cluster's mirrors given, the file is asked of each in turn by its
digest (``<mirror>/blobs/sha256/<sha256>``, the read token as Bearer) before
its own URL: a node without internet installs engines from them. The partial
is named after the digest, so bytes begun on one mirror are finished on the
next: content addressed, they are the same bytes everywhere.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

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


def blob_url(mirror: str, sha256: str) -> str:
    """Where a mirror serves a file by its digest."""
    return f"{mirror.rstrip('/')}/blobs/sha256/{sha256}"


async def download(
    url: str,
    dest_dir: Path,
    sha256: str,
    *,
    name: str | None = None,
    progress: Progress | None = None,
    client: httpx.AsyncClient | None = None,
    mirrors: Sequence[str] = (),
    mirror_token: str = "",
    on_origin: Callable[[str], None] | None = None,
    verify: ssl.SSLContext | bool = True,
) -> Path:
    """Fetch ``url`` into ``dest_dir/name`` and return that path once it matches ``sha256``.

    ``mirrors`` are asked first for the file by its digest, in order, with
    ``mirror_token``; ``on_origin`` hears where the bytes come from, in words.
    ``verify``: the TLS a client of our own checks servers with (an HTTPS
    mirror's certificate may be the cluster CA's).
    Raises DownloadError when no place can be reached or all refuse, and
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

    auth = {"Authorization": f"Bearer {mirror_token}"} if mirror_token else {}
    # The token goes to the mirrors only, never to the release's own host.
    places = [(blob_url(m, sha256), auth, f"mirror {urlsplit(m).netloc}") for m in mirrors if m]
    if url:
        places.append((url, {}, urlsplit(url).netloc or url))
    if not places:
        raise DownloadError(f"{name} has no URL and no mirror to come from")
    own_client = client is None
    if client is None:
        client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=True, verify=verify)
    failures: list[str] = []
    try:
        for i, (where, headers, label) in enumerate(places):
            last = i == len(places) - 1
            if on_origin:
                on_origin(label)
            try:
                await _fetch(client, where, part, progress, headers)
            except DownloadError as exc:
                if last and not failures:
                    raise
                failures.append(f"{label}: {exc.message}")
                if last:
                    raise _none_gave(name, failures) from exc
                log.info("%s: %s; trying %s", name, exc.message, places[i + 1][2])
                continue
            got = await asyncio.to_thread(sha256_file, part)
            if got == sha256:
                os.replace(part, final)
                return final
            part.unlink(missing_ok=True)
            if last:
                raise ChecksumMismatch(name, sha256, got)
            failures.append(f"{label}: sent bytes with sha256 {got}")
            log.warning("%s from %s does not match its pinned sha256; trying the next", name, label)
    finally:
        if own_client:
            await client.aclose()
    raise AssertionError("unreachable")  # the loop returns or raises


def _none_gave(name: str, failures: list[str]) -> DownloadError:
    return DownloadError(
        f"{name} could not be fetched from any mirror or its own URL ({'; '.join(failures)})",
        hint="check the mirrors (llmgw ctl mirror list; add the archive with "
        "llmgw ctl mirror add URL --engine --sha256 X) and the node's network; "
        "the next try resumes where this one stopped",
    )


async def _fetch(
    client: httpx.AsyncClient,
    url: str,
    part: Path,
    progress: Progress | None,
    headers: dict[str, str] | None = None,
) -> None:
    """Append the rest of ``url`` to ``part``, or start it over if the server cannot resume."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {**(headers or {}), **({"Range": f"bytes={offset}-"} if offset else {})}
    try:
        async with client.stream("GET", url, headers=headers) as response:
            if response.status_code == 416 and offset:
                # The partial already holds every byte (or is longer than the
                # file now is): let the digest decide rather than refetch.
                log.info("%s: the partial download is already complete", url)
                return
            if response.status_code in (401, 403) and "Authorization" in headers:
                raise DownloadError(
                    f"{url} refused the node's mirror token "
                    f"({response.status_code} {response.reason_phrase})",
                    hint="give the mirror the read token the control plane sends "
                    "(its mirror-read-token)",
                )
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
                # What arrived is written even when the connection is cut, so
                # the next try (or the next mirror) resumes at that very byte.
                buf = bytearray()
                try:
                    async for chunk in response.aiter_bytes():
                        buf += chunk
                        done += len(chunk)
                        if len(buf) >= CHUNK_BYTES:
                            await asyncio.to_thread(f.write, bytes(buf))
                            buf.clear()
                            if progress:
                                progress(done, total)
                finally:
                    await asyncio.to_thread(f.write, bytes(buf))
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
