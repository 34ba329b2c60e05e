"""The agent port's TLS, behind the same bounds as the HTTP port.

grpclib hands its ``ssl`` context to ``create_server``, where each accepted
connection starts its handshake before anything of ours sees it: a client
could hold a connection for asyncio's 60 s handshake default, as many times
as it has descriptors. Here the port's listening socket is ours: each
connection is counted by its client as it is accepted (``PortGuard.take``;
one past a bound is reset before any transport is made for it), then handed
to the loop with ``connect_accepted_socket(ssl=…, ssl_handshake_timeout=…)``,
and only a finished handshake reaches grpclib's HTTP/2 protocol.

(A plain TCP server upgraded with ``start_tls`` would be simpler, but uvloop
starts reading right after ``connection_made`` even when it paused, so the
client's first handshake bytes could land in the plain protocol and be lost.)
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from grpclib.server import Server

from gatewayd.http.guard import PortGuard
from gatewayd.http.tls_accept import TlsListener

log = logging.getLogger(__name__)


class GuardedServer(Server):
    """grpclib's ``Server``, accepting through a ``PortGuard`` and finishing TLS itself."""

    async def start_guarded(
        self, host: str, port: int, *, ssl_context: ssl.SSLContext, guard: PortGuard
    ) -> None:
        loop = asyncio.get_running_loop()
        # grpclib's close() and wait_closed() use these two attributes as after start().
        factory = self._protocol_factory
        self._server = TlsListener(
            host,
            port,
            ssl_context,
            guard,
            lambda key, _source: _Counted(factory, guard, key),
            "agent port",
        )
        self._server_closed_fut = loop.create_future()


class _Counted(asyncio.Protocol):
    """grpclib's protocol for one connection, its count released when it ends."""

    def __init__(self, factory, guard: PortGuard, key: str):
        # grpclib's protocol (and its handler) only once the handshake is done: a
        # handler made for a connection that never got there would never be let go.
        self._factory = factory
        self._inner: asyncio.Protocol | None = None
        self._guard = guard
        self._key: str | None = key

    def release(self) -> None:
        if self._key is not None:
            self._guard.release(self._key)
            self._key = None

    def connection_made(self, transport) -> None:
        self._inner = self._factory()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self):
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc) -> None:
        self.release()
        if self._inner is not None:
            self._inner.connection_lost(exc)
