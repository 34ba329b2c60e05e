"""Fetching model weights into a node's cache, against a local HTTP server with Range."""

from __future__ import annotations

import asyncio
import hashlib
import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from agentd.weights import (
    PICKLE_HINT,
    ChecksumMismatch,
    DownloadFailed,
    PickleRefused,
    UnsafeName,
    Weights,
    WeightsError,
    WeightsFetcher,
    WeightsMissing,
    hf_url,
    is_pickled,
    redact,
)
from llmgw.catalog.model import Model, ModelSource
from llmgw.errors import LlmgwError
from llmgw.tls import pki
from tests.fakes.tiny_repo import make_tiny_repo

# 1 MiB, every byte value, opening with the GGUF magic (local files are checked for it).
BLOB = b"GGUF" + (bytes(range(256)) * 4096)[4:]
BLOB_SHA = hashlib.sha256(BLOB).hexdigest()
FILE = "/org/repo/resolve/main/model.gguf"


@dataclass
class FileServer:
    """An HTTP/1.1 file server that honours Range and If-Range and can cut a download short."""

    files: dict[str, bytes] = field(default_factory=dict)
    # Bytes sent before the connection is dropped, one entry per request to cut.
    cuts: list[int] = field(default_factory=list)
    status: dict[str, int] = field(default_factory=dict)
    requests: list[dict[str, str]] = field(default_factory=list)
    base_url: str = ""
    _server: asyncio.Server | None = None

    async def start(self, tls: ssl.SSLContext | None = None) -> FileServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=tls)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    def etag(self, path: str) -> str:
        return '"' + hashlib.sha256(self.files[path]).hexdigest()[:16] + '"'

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await reader.readline()).decode()
            headers = {}
            while line := (await reader.readline()).decode().strip():
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            target = request_line.split(" ")[1]
            self.requests.append({"path": target, **headers})
            path = target.split("?", 1)[0]
            await self._answer(writer, path, headers)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, path: str, headers: dict) -> None:
        if path in self.status or path not in self.files:
            code = self.status.get(path, 404)
            writer.write(f"HTTP/1.1 {code} Nope\r\nContent-Length: 0\r\n\r\n".encode())
            return
        data = self.files[path]
        start = 0
        rng = headers.get("range", "")
        if rng.startswith("bytes=") and headers.get("if-range", self.etag(path)) == self.etag(path):
            start = int(rng[6:].split("-")[0])
            if start >= len(data):
                writer.write(
                    f"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */"
                    f"{len(data)}\r\nContent-Length: 0\r\n\r\n".encode()
                )
                return
        head = [
            f"Content-Length: {len(data) - start}",
            f"ETag: {self.etag(path)}",
            "Accept-Ranges: bytes",
        ]
        if start:
            head.insert(0, f"Content-Range: bytes {start}-{len(data) - 1}/{len(data)}")
        status = "206 Partial Content" if start else "200 OK"
        writer.write((f"HTTP/1.1 {status}\r\n" + "\r\n".join(head) + "\r\n\r\n").encode())
        body = data[start:]
        if self.cuts:
            body = body[: self.cuts.pop(0)]
        writer.write(body)
        await writer.drain()


@pytest.fixture
async def server():
    srv = await FileServer(files={FILE: BLOB}).start()
    yield srv
    await srv.close()


def _fetcher(tmp_path: Path, server: FileServer, **kw) -> WeightsFetcher:
    kw = {"retries": 0, "retry_backoff_s": 0.0, "progress_every_s": 0.0, **kw}
    return WeightsFetcher(tmp_path / "weights", hf_base_url=server.base_url, **kw)


HF = "hf:org/repo:model.gguf"


async def test_an_hf_file_is_fetched_into_the_cache_with_progress(tmp_path, server):
    seen: list[tuple[int, int]] = []
    got = await _fetcher(tmp_path, server).ensure(
        "gemma", HF, sha256=BLOB_SHA, on_progress=lambda d, t: seen.append((d, t))
    )
    assert got == Weights(tmp_path / "weights" / "gemma" / "model.gguf", len(BLOB), BLOB_SHA, True)
    assert got.path.read_bytes() == BLOB
    assert seen[0] == (0, len(BLOB)) and seen[-1] == (len(BLOB), len(BLOB))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    record = json.loads((got.path.parent / ".model.gguf.json").read_text())
    assert record["size"] == len(BLOB) and record["sha256"] == BLOB_SHA
    assert sorted(p.name for p in got.path.parent.iterdir()) == [".model.gguf.json", "model.gguf"]


async def test_a_cut_download_resumes_where_it_stopped(tmp_path, server):
    # The second call asks only for the rest, as a restarted shard would.
    server.cuts = [300_000]
    fetcher = _fetcher(tmp_path, server)
    with pytest.raises(DownloadFailed, match="downloading http://127.0.0.1:.* failed"):
        await fetcher.ensure("gemma", HF, sha256=BLOB_SHA)
    partial = tmp_path / "weights" / "gemma" / ".model.gguf.partial"
    assert partial.stat().st_size == 300_000
    got = await fetcher.ensure("gemma", HF, sha256=BLOB_SHA)
    assert got.path.read_bytes() == BLOB and not partial.exists()
    assert server.requests[1]["range"] == "bytes=300000-"
    assert server.requests[1]["if-range"] == server.etag(FILE)


async def test_one_call_retries_a_cut_and_resumes(tmp_path, server):
    server.cuts = [100_000, 200_000]
    got = await _fetcher(tmp_path, server, retries=3).ensure("gemma", HF, sha256=BLOB_SHA)
    assert got.path.read_bytes() == BLOB
    assert [r.get("range") for r in server.requests] == [None, "bytes=100000-", "bytes=300000-"]


async def test_a_file_that_changed_since_the_cut_is_fetched_whole(tmp_path, server):
    server.cuts = [300_000]
    fetcher = _fetcher(tmp_path, server)
    with pytest.raises(DownloadFailed):
        await fetcher.ensure("gemma", HF)
    server.files[FILE] = b"new" + BLOB  # another ETag: If-Range gets the whole file
    got = await fetcher.ensure("gemma", HF)
    assert got.path.read_bytes() == b"new" + BLOB
    assert got.sha256 == hashlib.sha256(b"new" + BLOB).hexdigest()


async def test_a_partial_that_is_already_whole_is_finished_without_fetching_again(tmp_path, server):
    # The agent stopped after the last byte but before the rename.
    partial = tmp_path / "weights" / "gemma" / ".model.gguf.partial"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(BLOB)
    (partial.parent / ".model.gguf.partial.json").write_text(json.dumps({"source": HF}))
    got = await _fetcher(tmp_path, server).ensure("gemma", HF, sha256=BLOB_SHA)
    assert got.path.read_bytes() == BLOB and server.requests[0]["range"] == f"bytes={len(BLOB)}-"


async def test_a_sha256_mismatch_removes_the_download(tmp_path, server):
    with pytest.raises(ChecksumMismatch, match="not the 0{64} the model pins") as e:
        await _fetcher(tmp_path, server).ensure("gemma", HF, sha256="0" * 64)
    assert isinstance(e.value, LlmgwError) and e.value.hint
    assert list((tmp_path / "weights" / "gemma").iterdir()) == []


@pytest.mark.parametrize(
    "source",
    [
        "hf:org/repo:pytorch_model.bin",
        "hf:org/repo@v1:sub/model.PT",
        "https://example.org/m/model.ckpt?download=true",
        "https://example.org/m/weights.pth#frag",
        "https://example.org/m/w.pt2",
        "https://example.org/m/w.pkl",
        "https://example.org/m/w.pickle",
    ],
)
async def test_pickle_weights_are_refused_before_any_request(tmp_path, server, source):
    with pytest.raises(PickleRefused) as e:
        await _fetcher(tmp_path, server).ensure("gemma", source)
    assert PICKLE_HINT in e.value.hint
    assert server.requests == []
    assert not (tmp_path / "weights").exists()


async def test_allow_pickle_lets_a_pickle_through_on_purpose(tmp_path, server):
    server.files["/org/repo/resolve/main/pytorch_model.bin"] = BLOB
    got = await _fetcher(tmp_path, server).ensure(
        "gemma", "hf:org/repo:pytorch_model.bin", allow_pickle=True
    )
    assert got.path.name == "pytorch_model.bin" and got.downloaded


@pytest.mark.parametrize(
    ("model", "source"),
    [
        (".hidden", HF),
        ("..", HF),
        ("a/b", HF),
        ("gemma", ModelSource(kind="hf", location="org/repo", file="../escape.gguf")),
        ("gemma", ModelSource(kind="hf", location="org/..", file="model.gguf")),
        ("gemma", ModelSource(kind="hf", location="org/repo", file=".env")),
        ("gemma", "https://example.org/m/.."),
        ("gemma", "https://example.org/m/.model.gguf"),
    ],
)
async def test_names_from_outside_must_be_one_plain_path_element(tmp_path, server, model, source):
    with pytest.raises(UnsafeName, match="one path element not starting with a dot"):
        await _fetcher(tmp_path, server).ensure(model, source)
    assert server.requests == []


async def test_a_cached_file_is_not_fetched_again(tmp_path, server):
    fetcher = _fetcher(tmp_path, server)
    await fetcher.ensure("gemma", HF, sha256=BLOB_SHA)
    again = await _fetcher(tmp_path, server).ensure("gemma", HF, sha256=BLOB_SHA)
    assert again.downloaded is False and again.sha256 == BLOB_SHA
    assert len(server.requests) == 1


async def test_a_cached_file_that_is_not_what_the_model_asks_for_is_fetched_again(tmp_path, server):
    fetcher = _fetcher(tmp_path, server)
    got = await fetcher.ensure("gemma", HF)
    got.path.write_bytes(BLOB[:10])  # truncated behind the agent's back
    assert (await fetcher.ensure("gemma", HF)).downloaded
    with pytest.raises(ChecksumMismatch):  # another pinned sha256: fetched and checked
        await fetcher.ensure("gemma", HF, sha256="1" * 64)
    assert len(server.requests) == 3


async def test_two_shards_of_one_model_share_one_download(tmp_path, server):
    fetcher = _fetcher(tmp_path, server)
    a, b = await asyncio.gather(fetcher.ensure("gemma", HF), fetcher.ensure("gemma", HF))
    assert a.path == b.path and len(server.requests) == 1


async def test_a_missing_file_on_the_server_is_said_plainly_without_retrying(tmp_path, server):
    with pytest.raises(DownloadFailed, match="answered 404") as e:
        await _fetcher(tmp_path, server, retries=3).ensure("gemma", "hf:org/repo:nothere.gguf")
    assert "revision" in e.value.hint and len(server.requests) == 1


async def test_a_server_error_is_retried(tmp_path, server):
    server.status[FILE] = 503
    with pytest.raises(DownloadFailed, match="answered 503"):
        await _fetcher(tmp_path, server, retries=2).ensure("gemma", HF)
    assert len(server.requests) == 3


async def test_a_mirror_replaces_hugging_face(tmp_path, server):
    fetcher = WeightsFetcher(tmp_path / "w", hf_base_url="https://unreachable.invalid", retries=0)
    got = await fetcher.ensure("gemma", HF, mirror_url=server.base_url)
    assert got.path.read_bytes() == BLOB


async def test_an_https_source_is_fetched_over_verified_tls(tmp_path):
    ca = pki.create_ca("test")
    leaf = pki.issue_server_cert(ca, ["127.0.0.1"])
    (tmp_path / "s.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "s.key").write_bytes(leaf.key_pem)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(tmp_path / "s.crt", tmp_path / "s.key")
    srv = await FileServer(files={"/m/model.gguf": BLOB}).start(tls)
    try:
        trust = ssl.create_default_context(cadata=ca.cert_pem.decode())
        async with httpx.AsyncClient(verify=trust) as client:
            fetcher = WeightsFetcher(tmp_path / "w", client=client, retries=0)
            got = await fetcher.ensure(
                "gemma", f"{srv.base_url}/m/model.gguf?token=abc", sha256=BLOB_SHA
            )
        assert got.path == tmp_path / "w" / "gemma" / "model.gguf" and got.downloaded
        assert srv.requests[0]["path"] == "/m/model.gguf?token=abc"
        assert "abc" not in (got.path.parent / ".model.gguf.json").read_text()
    finally:
        await srv.close()


async def test_a_local_file_is_used_in_place_never_copied(tmp_path, server):
    weights = tmp_path / "models" / "gemma.gguf"
    weights.parent.mkdir()
    weights.write_bytes(BLOB)
    fetcher = _fetcher(tmp_path, server)
    got = await fetcher.ensure("gemma", str(weights), sha256=BLOB_SHA)
    assert got == Weights(weights, len(BLOB), BLOB_SHA, downloaded=False)
    assert not (tmp_path / "weights" / "gemma" / "gemma.gguf").exists()
    assert (await fetcher.ensure("gemma", f"file://{weights}")).path == weights
    with pytest.raises(ChecksumMismatch):
        await fetcher.ensure("gemma", str(weights), sha256="2" * 64)
    assert server.requests == []


async def test_a_local_files_hash_is_remembered_until_it_changes(tmp_path, server):
    weights = tmp_path / "gemma.gguf"
    weights.write_bytes(BLOB)
    fetcher = _fetcher(tmp_path, server)
    await fetcher.ensure("gemma", str(weights), sha256=BLOB_SHA)
    memo = json.loads((tmp_path / "weights" / "gemma" / ".local.json").read_text())
    assert memo["sha256"] == BLOB_SHA
    weights.write_bytes(b"GGUF" + BLOB[::-1])  # another file: hashed again, and refused
    with pytest.raises(ChecksumMismatch):
        await fetcher.ensure("gemma", str(weights), sha256=BLOB_SHA)


async def test_local_sources_that_are_missing_or_pickles_are_refused(tmp_path, server):
    fetcher = _fetcher(tmp_path, server)
    with pytest.raises(WeightsMissing, match="does not exist on this node"):
        await fetcher.ensure("gemma", str(tmp_path / "nothere.gguf"))
    (tmp_path / "m.pth").write_bytes(b"x")
    with pytest.raises(PickleRefused):
        await fetcher.ensure("gemma", str(tmp_path / "m.pth"))
    allowed = await fetcher.ensure("gemma", str(tmp_path / "m.pth"), allow_pickle=True)
    assert allowed.size_bytes == 1


async def test_a_local_directory_is_used_in_place_unless_it_holds_pickles(tmp_path, server):
    d = make_tiny_repo().write(tmp_path / "qwen")
    (d / "sub").mkdir(parents=True)
    fetcher = _fetcher(tmp_path, server)
    assert (await fetcher.ensure("qwen", str(d))).path == d
    (d / "sub" / "training_args.bin").write_bytes(b"x")
    with pytest.raises(PickleRefused, match="sub/training_args.bin"):
        await fetcher.ensure("qwen", str(d))
    assert (await fetcher.ensure("qwen", str(d), allow_pickle=True)).path == d
    with pytest.raises(WeightsError, match="a sha256 pins one file"):
        await fetcher.ensure("qwen", str(d), sha256=BLOB_SHA, allow_pickle=True)


async def test_a_catalog_model_is_fetched_with_its_own_settings(tmp_path, server):
    model = Model(name="gemma", source=HF, sha256=BLOB_SHA.upper())
    got = await _fetcher(tmp_path, server).ensure_model(model)
    assert got.sha256 == BLOB_SHA
    # A catalog model in a pickle format is refused before it exists...
    with pytest.raises(ValueError, match="pickle format"):
        Model(name="g", source="hf:org/repo:pytorch_model.bin")
    # ...and the node refuses one anyway (a StartShard names only a source).
    with pytest.raises(PickleRefused):
        await _fetcher(tmp_path, server).ensure("g", "hf:org/repo:pytorch_model.bin")


@pytest.mark.parametrize(
    ("name", "pickled"),
    [
        ("pytorch_model.bin", True),
        ("model.ckpt", True),
        ("x.PT", True),
        ("w.pth", True),
        ("a.pkl", True),
        ("m.pt2", True),
        ("m.pickle", True),
        ("https://h/r/resolve/main/model.ckpt?download=true", True),
        ("hf:o/r:model.bin#x", True),
        ("model.safetensors", False),
        ("m.gguf", False),
        ("model.bin.gguf", False),
        ("https://h/m.gguf?x=.bin", False),
        ("binary", False),
    ],
)
def test_pickle_formats_are_known_by_their_names(name, pickled):
    assert is_pickled(name) is pickled


def test_urls_in_errors_carry_no_credentials_or_tokens():
    assert (
        redact("https://user:pw@h.example:8443/m/x.gguf?token=abc#f")
        == "https://h.example:8443/m/x.gguf"
    )


def test_hf_urls_follow_the_hubs_layout_with_a_revision_or_main():
    src = ModelSource.parse("hf:org/repo@refs/pr/1:sub/model.gguf")
    assert (
        hf_url(src, "https://mirror.lan/")
        == "https://mirror.lan/org/repo/resolve/refs%2Fpr%2F1/sub/model.gguf"
    )
    assert (
        hf_url(ModelSource.parse(HF)) == "https://huggingface.co/org/repo/resolve/main/model.gguf"
    )


async def test_a_local_file_that_is_not_weights_is_refused_saying_what_it_is_not(tmp_path, server):
    # The node is the last to see a path the control plane could not: /etc/passwd
    # would otherwise start llama.cpp over and over on a text file.
    text = tmp_path / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    fetcher = _fetcher(tmp_path, server)
    with pytest.raises(WeightsError, match="neither a GGUF file .no GGUF magic. nor a safetensors"):
        await fetcher.ensure("x", str(text))
    (tmp_path / "fake.gguf").write_bytes(b"NOPE" + BLOB)
    with pytest.raises(WeightsError, match="is not a GGUF file"):
        await fetcher.ensure("x", str(tmp_path / "fake.gguf"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightsError, match="without config.json"):
        await fetcher.ensure("x", str(tmp_path / "empty"))
