"""Two or more mirrors on loopback for the peer tests, and a link between them that can be cut.

``Link`` is a TCP proxy one mirror reads another through: ``cut()`` is a
partition (every connection dropped, new ones closed at once), ``mend()``
ends it, ``cut_after(n)`` drops the connection after n bytes came back (a
peer gone mid-file).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

from llmgw.mirror.wire import FileEntry, Revision
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


def upload_commit(files: dict[str, bytes]) -> str:
    """An upload's commit: sha1 over its sorted "path sha256" lines."""
    lines = "".join(f"{p} {hashlib.sha256(d).hexdigest()}\n" for p, d in sorted(files.items()))
    return hashlib.sha1(lines.encode()).hexdigest()


def put_model(store: MirrorStore, repo: str, files: dict[str, bytes], ref="main") -> Revision:
    """Hold ``files`` as a revision of ``repo``, as an upload does."""
    entries = []
    for path, data in files.items():
        sha = hashlib.sha256(data).hexdigest()
        tmp = store.incoming_dir / f"test-{sha}"
        tmp.write_bytes(data)
        store.adopt_blob(tmp, sha)
        entries.append(FileEntry(path=path, size=len(data), sha256=sha))
    rev = Revision(repo=repo, commit=upload_commit(files), files=entries, source="upload")
    return store.put(rev, refs=[ref])


class TinyMirror:
    """A store, its PeerSync and the few routes peers read (until the daemon is wired)."""

    def __init__(self, data_dir, token: str, peers: list[str] = (), interval_s: float = 3600):
        from mirrord.peers import PeerSync

        self.data_dir = data_dir
        self.token = token
        self.store = MirrorStore(data_dir)
        self.peers = PeerSync(
            self.store, None, peers=list(peers), token=token, interval_s=interval_s
        )
        self.server = None
        self.task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    async def start(self, port: int = 0, *, loop: bool = True) -> TinyMirror:
        from mirrord.http.server import HttpServer

        self.server = HttpServer(self._handle, "127.0.0.1", port)
        await self.server.start()
        if loop:
            self.task = asyncio.create_task(self.peers.run())
        return self

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.peers.aclose()
        await self.server.close()

    async def _handle(self, req):
        from urllib.parse import unquote

        from mirrord.http.ranges import serve_file
        from mirrord.http.server import Response

        if req.header("authorization") != f"Bearer {self.token}":
            return Response(403, [], b"")
        parts = unquote(req.path).strip("/").split("/")
        if req.path == "/v1/state":
            return Response.json(self.store.state().model_dump(mode="json"))
        if req.path == "/v1/notify":
            self.peers.sync_now()
            return Response.json({})
        if parts[:2] == ["blobs", "sha256"] and self.store.has_blob(parts[2]):
            path = self.store.blob_path(parts[2])
            return serve_file(req, path, path.stat().st_size, parts[2], [])
        if len(parts) > 4 and parts[2] == "resolve":
            found = self.store.file(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
            if found:
                entry, path = found
                return serve_file(req, path, entry.size, entry.sha256, [])
        return Response(404, [], b"")
