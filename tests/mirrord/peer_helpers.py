"""Real mirror daemons on loopback for the peer tests, and a link between them that can be cut.

``PeerMirror`` is a MirrorDaemon sharing the cluster's read token with its
peers (as mirrors of one cluster do), changed through its management API
(an upload, a DELETE), which tells its peers as any change does.

``Link`` is a TCP proxy one mirror reads another through: ``cut()`` is a
partition (every connection dropped, new ones closed at once), ``mend()``
ends it, ``cut_after(n)`` drops the connection after n bytes came back (a
peer gone mid-file).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import ssl
from pathlib import Path

import httpx

from llmgw.mirror.config import MirrorServeConfig
from llmgw.mirror.wire import FileEntry, Peer, PeerList, Removed, Revision
from llmgw.paths import Paths
from mirrord.daemon import MirrorDaemon
from mirrord.peers import PeerSync
from mirrord.store import MirrorStore


class Link:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server: asyncio.Server | None = None
        self.broken = False
        self.budget_bytes: int | None = None
        # Bytes that came back through the link (answers), for tests of what was fetched.
        self.bytes_back = 0
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> Link:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def cut(self) -> None:
        self.broken = True
        for w in list(self._writers):
            w.close()

    def mend(self) -> None:
        self.broken = False
        self.budget_bytes = None

    def cut_after(self, n_bytes: int) -> None:
        self.budget_bytes = n_bytes

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.broken:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, counted=False),
                self._pipe(up_reader, writer, counted=True),
            )
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _pipe(self, src, dst, *, counted: bool) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(65536):
                if counted and self.budget_bytes is not None:
                    data = data[: self.budget_bytes]
                    self.budget_bytes -= len(data)
                    if not data:
                        break
                if counted:
                    self.bytes_back += len(data)
                dst.write(data)
                await dst.drain()
                if self.broken or (counted and self.budget_bytes == 0):
                    break
        dst.close()


class PeerMirror:
    def __init__(
        self,
        home: Path,
        read_token: str,
        tls: dict | None = None,
        interval_s: float = 3600,
        peers: tuple[str, ...] = (),
        max_bytes: int = 0,
    ) -> None:
        self.home = home
        self.max_bytes = max_bytes
        self.config_peers = list(peers)
        self.interval_s = interval_s
        self.read_token = read_token
        self.tls = tls or {}
        self.admin_token = secrets.token_urlsafe(16)
        self.daemon: MirrorDaemon | None = None
        # The link the tests read this mirror's peer through (set by the fixture).
        self.link: Link | None = None

    async def start(self, port: int = 0) -> PeerMirror:
        cfg = MirrorServeConfig(
            listen=f"127.0.0.1:{port}",
            upstream="",
            data_dir=str(self.home / "data"),
            # By default passes come when told (notify, sync_once), not from the clock.
            sync_interval_s=self.interval_s,
            tls=self.tls,
            peers=self.config_peers,
            max_bytes=self.max_bytes,
        )
        self.daemon = MirrorDaemon(
            cfg, Paths.under(self.home), read_token=self.read_token, admin_token=self.admin_token
        )
        await self.daemon.start()
        return self

    async def stop(self) -> None:
        if self.daemon is not None:
            await self.daemon.stop()
            self.daemon = None

    @property
    def url(self) -> str:
        return self.daemon.url

    @property
    def port(self) -> int:
        return self.daemon.server.port

    @property
    def store(self) -> MirrorStore:
        return self.daemon.store

    @property
    def peers(self) -> PeerSync:
        return self.daemon.peers

    def admin(self) -> httpx.AsyncClient:
        ca = self.tls.get("client_ca")
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.admin_token}"},
            verify=ssl.create_default_context(cafile=ca) if ca else True,
        )

    async def add(self, repo: str, files: dict[str, bytes], ref: str = "main") -> Revision:
        """Upload ``files`` as a revision of ``repo`` through the management API."""
        upload = secrets.token_hex(4)
        async with self.admin() as c:
            for path, data in files.items():
                sha = hashlib.sha256(data).hexdigest()
                r = await c.put(
                    f"/v1/uploads/{upload}/{path}", content=data, headers={"X-Llmgw-Sha256": sha}
                )
                r.raise_for_status()
            r = await c.post(f"/v1/uploads/{upload}/commit", json={"repo": repo, "ref": ref})
            r.raise_for_status()
            return Revision.model_validate_json(r.content)

    def hold(self, repo: str, files: dict[str, bytes]) -> Revision:
        """Hold ``files`` as a revision through the store alone (no peer is told)."""
        entries = []
        for path, data in files.items():
            sha = hashlib.sha256(data).hexdigest()
            tmp = self.store.incoming_dir / f"test-{sha}"
            tmp.write_bytes(data)
            self.store.adopt_blob(tmp, sha)
            entries.append(FileEntry(path=path, size=len(data), sha256=sha))
        commit = hashlib.sha1(repr(sorted(files)).encode() + b"".join(files.values())).hexdigest()
        return self.store.put(Revision(repo=repo, commit=commit, files=entries), refs=["main"])

    async def rm(self, repo: str, commit: str) -> Removed:
        async with self.admin() as c:
            r = await c.delete(f"/v1/repos/{repo}", params={"revision": commit})
            r.raise_for_status()
            return Removed.model_validate_json(r.content)

    async def add_peer(self, url: str) -> list[Peer]:
        async with self.admin() as c:
            r = await c.post("/v1/peers", json={"url": url})
            r.raise_for_status()
            return PeerList.model_validate_json(r.content).peers

    async def peer_list(self) -> list[Peer]:
        async with self.admin() as c:
            r = await c.get("/v1/peers")
            r.raise_for_status()
            return PeerList.model_validate_json(r.content).peers

    def held(self) -> set[tuple[str, str]]:
        return {(r.repo, r.commit) for r in self.store.revisions()}

    async def until(self, condition) -> None:
        """Wait (on this mirror's sync passes, not on a clock) until ``condition()`` holds."""
        async with asyncio.timeout(30):
            while not condition():
                await self.peers.wait_passes(self.peers.passes + 1)

    async def add_engine(self, name: str, data: bytes) -> Revision:
        async with self.admin() as c:
            sha = hashlib.sha256(data).hexdigest()
            r = await c.put(
                f"/v1/files/engine/{name}", content=data, headers={"X-Llmgw-Sha256": sha}
            )
            r.raise_for_status()
            return Revision.model_validate_json(r.content)
