"""Engine archives from the cluster's mirrors by their sha256, each mirror in turn, then the URL.

Two blob servers on loopback play mirrors (``/blobs/sha256/<sha256>``, taking
the read token), a third the release's own host; the archive is the real
llama.cpp-style release of the conftest, so an install runs it at the end.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass, field

import pytest

from agentd.engine_provider import LocalEngines
from agentd.provision.download import DownloadError, download
from agentd.provision.llamacpp import LlamaCppRelease, install_from_archive
from proto.llmgw.v1 import InstallEngine

TOKEN = "read-token-1c9e"
PAYLOAD = os.urandom(3 * 1024 * 1024 + 77)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


@dataclass
class BlobServer:
    """An HTTP/1.1 server of files by path, honouring Range; it can need a token or cut."""

    files: dict[str, bytes] = field(default_factory=dict)
    token: str = ""
    # Bytes of body sent before the connection drops, one entry per GET to cut.
    cuts: list[int] = field(default_factory=list)
    requests: list[dict[str, str]] = field(default_factory=list)
    url: str = ""
    _server: asyncio.Server | None = None

    async def start(self) -> BlobServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    def hold(self, data: bytes) -> None:
        self.files[f"/blobs/sha256/{hashlib.sha256(data).hexdigest()}"] = data

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target = (await reader.readline()).decode().split(" ")[1]
            headers = {}
            while line := (await reader.readline()).decode().strip():
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            self.requests.append({"path": target, **headers})
            await self._answer(writer, target, headers)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, path: str, headers: dict) -> None:
        def status(code: str) -> None:
            writer.write(f"HTTP/1.1 {code}\r\nContent-Length: 0\r\n\r\n".encode())

        if self.token and headers.get("authorization") != f"Bearer {self.token}":
            return status("403 Forbidden" if "authorization" in headers else "401 Unauthorized")
        data = self.files.get(path)
        if data is None:
            return status("404 Not Found")
        start = int(headers.get("range", "bytes=0-")[6:].split("-")[0])
        head = f"Content-Length: {len(data) - start}\r\nAccept-Ranges: bytes\r\n"
        if start:
            head += f"Content-Range: bytes {start}-{len(data) - 1}/{len(data)}\r\n"
        code = "206 Partial Content" if start else "200 OK"
        writer.write(f"HTTP/1.1 {code}\r\n{head}\r\n".encode())
        body = data[start:]
        if self.cuts:
            body = body[: self.cuts.pop(0)]
        writer.write(body)
        await writer.drain()


@pytest.fixture
async def places():
    """Two mirrors taking TOKEN, and the release's own host."""
    servers = [await BlobServer(token=TOKEN).start() for _ in range(2)]
    servers.append(await BlobServer().start())
    yield servers
    for s in servers:
        await s.close()


async def test_an_engine_archive_comes_from_a_mirrors_blob_url_with_the_token(
    places, release_archive, tmp_path
):
    m1, m2, origin = places
    m1.hold(release_archive.data)
    url = f"{origin.url}/releases/{release_archive.name}"
    release = LlamaCppRelease(
        "b10434", "vulkan", url, release_archive.sha256, (m1.url, m2.url), TOKEN
    )
    said: list[str] = []

    inst = await install_from_archive(release, tmp_path, say=said.append)

    assert inst.version_text.startswith("version: ")
    assert said[0] == f"downloading llama-b10434 from mirror {m1.host} (28 MB)"
    assert inst.source == f"mirror {m1.host} (sha256 {release_archive.sha256})"
    (asked,) = m1.requests
    assert asked["path"] == f"/blobs/sha256/{release_archive.sha256}"
    assert asked["authorization"] == f"Bearer {TOKEN}"
    assert m2.requests == [] and origin.requests == []


async def test_mirrors_without_the_archive_are_passed_for_the_release_url_without_the_token(
    places, tmp_path
):
    m1, m2, origin = places
    origin.files["/releases/llama.tar.gz"] = PAYLOAD
    heard: list[str] = []

    path = await download(
        f"{origin.url}/releases/llama.tar.gz",
        tmp_path,
        DIGEST,
        mirrors=[m1.url, m2.url],
        mirror_token=TOKEN,
        on_origin=heard.append,
    )

    assert path.read_bytes() == PAYLOAD
    assert heard == [f"mirror {m1.host}", f"mirror {m2.host}", origin.host]
    # Guards the cluster's read token handed to GitHub along with the download.
    assert [r.get("authorization") for r in origin.requests] == [None]


async def test_an_archive_cut_on_one_mirror_is_resumed_on_the_next_at_the_byte_reached(
    places, tmp_path
):
    m1, m2, origin = places
    for m in (m1, m2):
        m.hold(PAYLOAD)
    half = len(PAYLOAD) // 2
    m1.cuts.append(half)

    path = await download(
        f"{origin.url}/releases/llama.tar.gz",
        tmp_path,
        DIGEST,
        mirrors=[m1.url, m2.url],
        mirror_token=TOKEN,
    )

    assert path.read_bytes() == PAYLOAD
    (rest,) = m2.requests
    assert rest["range"] == f"bytes={half}-"
    assert origin.requests == []


async def test_a_mirror_sending_other_bytes_is_passed_for_the_next(places, tmp_path):
    m1, m2, origin = places
    m1.files[f"/blobs/sha256/{DIGEST}"] = os.urandom(len(PAYLOAD))
    m2.hold(PAYLOAD)

    path = await download(
        f"{origin.url}/releases/llama.tar.gz", tmp_path, DIGEST, mirrors=[m1.url, m2.url],
        mirror_token=TOKEN,
    )  # fmt: skip

    assert path.read_bytes() == PAYLOAD
    assert "range" not in m2.requests[0], "the bad bytes are not resumed"


async def test_an_archive_no_place_holds_is_a_clear_error_naming_each(places, tmp_path):
    m1, m2, origin = places
    m2.token = "another-token"

    with pytest.raises(DownloadError) as e:
        await download(
            f"{origin.url}/releases/llama.tar.gz", tmp_path, DIGEST, name="llama.tar.gz",
            mirrors=[m1.url, m2.url], mirror_token=TOKEN,
        )  # fmt: skip

    said = e.value.message
    assert said.startswith("llama.tar.gz could not be fetched from any mirror or its own URL")
    assert f"mirror {m1.host}: " in said and "404" in said
    assert "refused the node's mirror token (403" in said
    assert "llmgw ctl mirror add" in e.value.hint
    assert TOKEN not in said + e.value.hint


async def test_install_engine_from_the_control_plane_uses_its_mirrors(
    places, release_archive, tmp_path
):
    m1, m2, origin = places
    m2.hold(release_archive.data)
    engines = LocalEngines(tmp_path / "engines")

    await engines.install(
        InstallEngine(
            engine="llama.cpp",
            version="b10434",
            variant="vulkan",
            source="archive",
            url=f"{origin.url}/releases/{release_archive.name}",
            sha256=release_archive.sha256,
            mirror_urls=[m1.url, m2.url],
            mirror_token=TOKEN,
        )
    )

    (state,) = engines.manager.states()
    assert state.state == "installed", state.words
    assert [r["path"] for r in m2.requests] == [f"/blobs/sha256/{release_archive.sha256}"]
    assert origin.requests == []
