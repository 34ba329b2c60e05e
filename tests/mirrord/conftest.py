"""A real mirror daemon on 127.0.0.1:0 for tests: tmp data dir, tokens of its own, no upstream.

    async def test_x(mirror):                     # one mirror, started and stopped
        rev = mirror.put_model("org/tiny", {"config.json": b"{}"})
        async with mirror.client() as c:          # httpx, with the read token
            ...
    async def test_y(start_mirror):               # several (peers), each its own home
        a = await start_mirror(upstream=hub.url)
        b = await start_mirror(peers=[a.url], sync_interval_s=3600)

``put_model`` / ``put_artifact`` put things straight into the store (the
MirrorStore API), for tests of serving that need no pull.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

# Read by huggingface_hub when it is first imported: set before any test imports it.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "0")
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")

import httpx
import pytest

from llmgw.mirror.config import MirrorServeConfig
from llmgw.mirror.wire import FileEntry, Revision
from llmgw.paths import Paths
from mirrord.daemon import MirrorDaemon
from mirrord.store import MirrorStore

# What the hub's .gitattributes keeps in LFS, and anything over 10 MB.
LFS_EXTS = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".zip")
LFS_MIN_BYTES = 10 << 20


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


@dataclass
class RunningMirror:
    daemon: MirrorDaemon
    home: Path
    read_token: str
    admin_token: str

    @property
    def url(self) -> str:
        return self.daemon.url

    @property
    def store(self) -> MirrorStore:
        return self.daemon.store

    @property
    def port(self) -> int:
        return self.daemon.server.port

    def headers(self, *, admin: bool = False) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token if admin else self.read_token}"}

    def client(self, *, admin: bool = False, **kw) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=self.headers(admin=admin), **kw)

    def _blob(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        if not self.store.has_blob(sha):
            tmp = self.store.incoming_dir / f"test-{secrets.token_hex(6)}"
            tmp.write_bytes(data)
            self.store.adopt_blob(tmp, sha)
        return sha

    def put_model(
        self,
        repo: str,
        files: dict[str, bytes],
        *,
        refs: tuple[str, ...] = ("main",),
        commit: str = "",
        lfs: set[str] | None = None,
        added_unix: float | None = None,
    ) -> Revision:
        """A model revision of ``files``, held as a pull would hold it (git ids for small files)."""
        entries = []
        for path, data in sorted(files.items()):
            sha = self._blob(data)
            is_lfs = (
                path in lfs
                if lfs is not None
                else path.endswith(LFS_EXTS) or len(data) >= LFS_MIN_BYTES
            )
            entries.append(
                FileEntry(
                    path=path,
                    size=len(data),
                    sha256=sha,
                    git_oid="" if is_lfs else git_blob_oid(data),
                    lfs=is_lfs,
                )
            )
        if not commit:
            lines = "".join(f"{e.path} {e.sha256}\n" for e in entries)
            commit = hashlib.sha1(lines.encode()).hexdigest()
        rev = Revision(kind="model", repo=repo, commit=commit, files=entries, source="test")
        return self.store.put(rev, refs=list(refs), added_unix=added_unix)

    def put_artifact(self, kind: str, name: str, data: bytes) -> Revision:
        """A wheel or an engine archive held whole."""
        sha = self._blob(data)
        files = [FileEntry(path=name, size=len(data), sha256=sha)]
        rev = Revision(kind=kind, repo=name, commit=sha, files=files, source="test")
        return self.store.put(rev)


@pytest.fixture
async def start_mirror(tmp_path):
    """``await start_mirror(**mirror.yaml keys)``: a new running mirror each call."""
    started: list[RunningMirror] = []

    async def start(**settings) -> RunningMirror:
        home = tmp_path / f"mirror{len(started)}"
        paths = Paths.under(home)
        settings.setdefault("listen", "127.0.0.1:0")
        settings.setdefault("upstream", "")
        settings.setdefault("data_dir", str(home / "data"))
        cfg = MirrorServeConfig.model_validate(settings)
        read_token, admin_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        daemon = MirrorDaemon(cfg, paths, read_token=read_token, admin_token=admin_token)
        await daemon.start()
        m = RunningMirror(daemon, home, read_token, admin_token)
        started.append(m)
        return m

    yield start
    for m in reversed(started):
        await m.daemon.stop()


@pytest.fixture
async def mirror(start_mirror) -> RunningMirror:
    return await start_mirror()
