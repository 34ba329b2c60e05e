"""A proxy in front of a mirror: it notes every HTTP request and can hold a download mid-file.

The end-to-end tests put one before each mirror the cluster names, so they can
see what the agent asked (``requests``: method, path and Range of each) and
stop a file's bytes at a chosen point (``hold``) — the moment a test kills the
mirror behind it, as a machine dying mid-file would.

Mirrors serve HTTPS: given ``tls``, the proxy takes TLS with a certificate of
the cluster CA's and speaks TLS to the mirror, checking its certificate
against the same CA, as any client of it does (tokens pass; a node
certificate ends at the proxy).

It runs on an event loop of its own thread: the tests around it are not async.
It reads each request's head and body (Content-Length only: what the agent,
huggingface_hub and gatewayd send) so that keep-alive connections are noted
request by request.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str


@dataclass
class _Hold:
    path_part: str
    after_bytes: int
    reached: threading.Event


@dataclass(frozen=True)
class ProxyTls:
    """The proxy's own side (certificate and key) and how it checks the mirror's (the CA)."""

    server: ssl.SSLContext
    upstream: ssl.SSLContext

    @classmethod
    def of(cls, cert: str, key: str, ca: str) -> ProxyTls:
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(cert, key)
        return cls(server, ssl.create_default_context(cafile=ca))


class MirrorProxy:
    def __init__(self, target_port: int, tls: ProxyTls | None = None) -> None:
        self.target_port = target_port
        self.tls = tls
        self.requests: list[Seen] = []
        # Each request answered, with the answer's status. An answer's head is
        # taken to start a read, as it does when a client waits for each answer
        # before asking again (every client here does).
        self.answered: list[tuple[Seen, int]] = []
        self.port = 0
        self._hold: _Hold | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> MirrorProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(
                self._serve, "127.0.0.1", 0, ssl=self.tls.server if self.tls else None
            ),
            self._loop,
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            self._drop_all()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def hold(self, path_part: str, after_bytes: int) -> threading.Event:
        """The next answer to a GET whose path holds ``path_part`` stops after that many bytes."""
        hold = _Hold(path_part, after_bytes, threading.Event())
        self._hold = hold
        return hold.reached

    def drop(self) -> None:
        """Close every connection now (the mirror behind is gone)."""
        asyncio.run_coroutine_threadsafe(self._drop_async(), self._loop).result(10)

    def status_of(self, seen: Seen) -> int | None:
        return next((status for s, status in self.answered if s is seen), None)

    def downloads(self, path_part: str) -> list[Seen]:
        return [r for r in self.requests if r.method == "GET" and path_part in r.path]

    async def _drop_async(self) -> None:
        self._drop_all()

    def _drop_all(self) -> None:
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._writers.clear()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(
                "127.0.0.1", self.target_port, ssl=self.tls.upstream if self.tls else None
            )
        except (OSError, ssl.SSLError):
            client_w.transport.abort()
            return
        self._writers |= {client_w, up_w}
        # The hold armed for the request being answered on this connection, if
        # any, the bytes of answer sent since it was armed, and the requests
        # not answered yet.
        current: list = [None, 0, []]
        try:
            await asyncio.gather(
                self._requests(client_r, up_w, current), self._answers(up_r, client_w, current)
            )
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            for w in (client_w, up_w):
                self._writers.discard(w)
                with contextlib.suppress(Exception):
                    w.transport.abort()

    async def _requests(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, current
    ) -> None:
        while True:
            try:
                head = await src.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                dst.close()
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            seen = Seen(method, path, headers.get("range", ""))
            self.requests.append(seen)
            current[2].append(seen)
            hold = self._hold
            if hold is not None and method == "GET" and hold.path_part in path:
                self._hold = None
                current[0], current[1] = hold, 0
            dst.write(head)
            length = int(headers.get("content-length", "0") or 0)
            while length > 0:
                chunk = await src.read(min(length, 1 << 16))
                if not chunk:
                    return
                dst.write(chunk)
                length -= len(chunk)
            await dst.drain()

    async def _answers(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, current) -> None:
        while chunk := await src.read(1 << 16):
            if chunk.startswith(b"HTTP/1.") and chunk[9:12].isdigit() and current[2]:
                self.answered.append((current[2].pop(0), int(chunk[9:12])))
            hold = current[0]
            if hold is not None:
                room = hold.after_bytes - current[1]
                if room <= len(chunk):
                    dst.write(chunk[:room])
                    await dst.drain()
                    hold.reached.set()
                    # Nothing more until the test drops the connection.
                    await asyncio.Event().wait()
                current[1] += len(chunk)
            dst.write(chunk)
            await dst.drain()
        dst.close()
