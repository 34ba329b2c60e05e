"""Engine archives pulled over verified HTTPS by their pinned sha256."""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from pathlib import Path

import httpx
import pytest

from llmgw.mirror.wire import PullRequest
from llmgw.tls import pki
from mirrord.pull import DigestMismatch, PullJob, code_of
from mirrord.pull.errors import PullInvalid, UpstreamFailed
from mirrord.pull.puller import Puller
from mirrord.store import MirrorStore, QuotaExceeded

ARCHIVE = b"llama.cpp release archive " * 4000
ARCHIVE_SHA = hashlib.sha256(ARCHIVE).hexdigest()
NAME = "llama-b4000-bin-ubuntu-x64.tar.gz"


class ReleaseServer:
    """An HTTPS server holding one archive; it cuts the first answer short when told to."""

    def __init__(self, data: bytes, cut_after: int = -1, *, ignore_range: bool = False) -> None:
        self.data = data
        self.cut_after = cut_after
        # A server that sends the whole file whatever Range asks (200, never 206).
        self.ignore_range = ignore_range
        # Statuses to answer before the archive (503: busy).
        self.fail_with: list[int] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.url = ""

    async def start(self, tls: ssl.SSLContext) -> ReleaseServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"https://127.0.0.1:{port}/releases/download/b4000/{NAME}"
        return self

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader, writer) -> None:
        try:
            method = (await reader.readline()).decode().split(" ")[0]
            headers = {}
            while line := (await reader.readline()).decode().strip():
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            self.requests.append((method, headers))
            if method == "GET" and self.fail_with:
                status = self.fail_with.pop(0)
                writer.write(f"HTTP/1.1 {status} Busy\r\nContent-Length: 0\r\n\r\n".encode())
                return
            start = int(headers.get("range", "bytes=0-")[6:].split("-")[0])
            if self.ignore_range:
                start = 0
            body = self.data[start:]
            status = "206 Partial Content" if start else "200 OK"
            head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
            if start:
                head += f"Content-Range: bytes {start}-{len(self.data) - 1}/{len(self.data)}\r\n"
            writer.write((head + "\r\n").encode())
            if method == "GET":
                if self.cut_after >= 0:
                    writer.write(body[: self.cut_after])
                    self.cut_after = -1
                    await writer.drain()
                    writer.transport.abort()
                    return
                writer.write(body)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


@pytest.fixture
def tls(tmp_path: Path):
    ca = pki.create_ca("test")
    leaf = pki.issue_server_cert(ca, ["127.0.0.1"])
    (tmp_path / "s.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "s.key").write_bytes(leaf.key_pem)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "s.crt", tmp_path / "s.key")
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    return server, client


async def pull_engine(tmp_path, tls, server: ReleaseServer, sha256: str, **store_kw):
    store = MirrorStore(tmp_path / "mirror", **store_kw)
    await server.start(tls[0])
    try:
        async with httpx.AsyncClient(verify=tls[1]) as client:
            p = Puller(store, client=client, backoff_s=0)
            req = PullRequest(source=server.url + "?token=abc", kind="engine", sha256=sha256)
            job = PullJob("p", req.source)
            return store, await p.pull(req, job), job
    finally:
        await server.close()


async def test_an_engine_archive_is_held_as_an_engine_revision_by_its_sha256(tmp_path, tls):
    server = ReleaseServer(ARCHIVE)
    store, rev, job = await pull_engine(tmp_path, tls, server, ARCHIVE_SHA)
    assert (rev.kind, rev.repo, rev.commit) == ("engine", NAME, ARCHIVE_SHA)
    assert rev.files[0].size == len(ARCHIVE)
    assert store.blob_path(ARCHIVE_SHA).read_bytes() == ARCHIVE
    # The query (a token, often) is never kept.
    assert "token" not in rev.source and rev.source.endswith(NAME)
    assert job.snapshot().bytes_done == len(ARCHIVE)


async def test_an_engine_archive_cut_short_is_resumed(tmp_path, tls):
    server = ReleaseServer(ARCHIVE, cut_after=10_000)
    store, _, _ = await pull_engine(tmp_path, tls, server, ARCHIVE_SHA)
    gets = [h for m, h in server.requests if m == "GET"]
    assert gets[-1]["range"] == "bytes=10000-"
    assert store.blob_path(ARCHIVE_SHA).read_bytes() == ARCHIVE


async def test_a_server_that_answers_a_range_with_the_whole_file_starts_it_over(tmp_path, tls):
    # Guards: appending a 200's body to the bytes held made a file twice its start.
    server = ReleaseServer(ARCHIVE, cut_after=10_000, ignore_range=True)
    store, _, job = await pull_engine(tmp_path, tls, server, ARCHIVE_SHA)
    gets = [h for m, h in server.requests if m == "GET"]
    assert len(gets) == 2 and gets[1]["range"] == "bytes=10000-"
    assert store.blob_path(ARCHIVE_SHA).read_bytes() == ARCHIVE
    assert job.snapshot().bytes_done == len(ARCHIVE)


async def test_a_busy_server_is_asked_again_and_one_that_stays_busy_fails_the_pull(tmp_path, tls):
    server = ReleaseServer(ARCHIVE)
    server.fail_with = [503, 502]
    store, _, _ = await pull_engine(tmp_path, tls, server, ARCHIVE_SHA)
    assert store.blob_path(ARCHIVE_SHA).read_bytes() == ARCHIVE
    busy = ReleaseServer(ARCHIVE)
    busy.fail_with = [503] * 4
    with pytest.raises(UpstreamFailed) as e:
        await pull_engine(tmp_path / "again", tls, busy, ARCHIVE_SHA)
    assert "503" in str(e.value) and code_of(e.value) == "unavailable"


async def test_an_engine_archive_with_another_sha256_is_refused_and_not_kept(tmp_path, tls):
    wrong = hashlib.sha256(b"something else").hexdigest()
    server = ReleaseServer(ARCHIVE)
    with pytest.raises(DigestMismatch) as e:
        await pull_engine(tmp_path, tls, server, wrong)
    assert wrong in str(e.value) and ARCHIVE_SHA in str(e.value)
    assert code_of(e.value) == "invalid"
    store = MirrorStore(tmp_path / "mirror")
    assert store.revisions() == [] and not store.has_blob(ARCHIVE_SHA)
    assert [p.name for p in store.incoming_dir.iterdir()] == []


async def test_an_engine_archive_past_the_quota_is_refused_before_its_bytes(tmp_path, tls):
    server = ReleaseServer(ARCHIVE)
    with pytest.raises(QuotaExceeded):
        await pull_engine(tmp_path, tls, server, ARCHIVE_SHA, max_bytes=1000)
    assert [m for m, _ in server.requests] == ["HEAD"]


@pytest.mark.parametrize(
    ("source", "sha256"),
    [
        (f"http://example.org/{NAME}", ARCHIVE_SHA),  # plain http
        (f"https://example.org/{NAME}", ""),  # no pin
        ("https://example.org/.hidden", ARCHIVE_SHA),  # not a plain name
    ],
)
async def test_an_engine_source_without_https_a_pin_or_a_plain_name_is_refused(
    tmp_path, source, sha256
):
    p = Puller(MirrorStore(tmp_path / "m"))
    try:
        with pytest.raises(Exception) as e:
            await p.pull(PullRequest(source=source, kind="engine", sha256=sha256), PullJob("p", ""))
    finally:
        await p.aclose()
    assert isinstance(e.value, PullInvalid) or code_of(e.value) == "invalid"
