"""The agent port's TLS, behind the same bounds as the HTTP port.

grpclib hands its ``ssl`` context to ``create_server``, where each accepted
connection starts its handshake before anything of ours sees it: a client
could hold a connection for asyncio's 60 s handshake default, as many times
as it has descriptors. Here the port accepts plain TCP; each connection is
counted by its client first (``PortGuard.admit``: refused ones are reset at
once), then upgraded with ``start_tls`` under ``tls_handshake_timeout``, and
only a finished handshake reaches grpclib's HTTP/2 protocol. Agents are few
and their streams long-lived, so the one more call per read this costs is
nothing beside TLS itself.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from grpclib.server import Server

from gatewayd.http.guard import PortGuard, reset

log = logging.getLogger(__name__)

# Connections the kernel queues before gatewayd accepts them (grpclib's default is 100;
# a flood should be accepted and reset, not crowd agents out of a short queue).
BACKLOG = 2048


class GuardedServer(Server):
    """grpclib's ``Server``, accepting through a ``PortGuard`` and finishing TLS itself."""

    async def start_guarded(
        self, host: str, port: int, *, ssl_context: ssl.SSLContext, guard: PortGuard
    ) -> None:
        loop = asyncio.get_running_loop()
        # grpclib's own start() with its ssl= replaced: close() and wait_closed()
        # use these two attributes as they would after start().
        self._server = await loop.create_server(
            lambda: _TlsGate(self, ssl_context, guard), host, port, backlog=BACKLOG
        )
        self._server_closed_fut = loop.create_future()


class _TlsGate(asyncio.Protocol):
    """One agent-port connection: counted, its handshake timed, then grpclib's."""

    def __init__(self, server: GuardedServer, ssl_context: ssl.SSLContext, guard: PortGuard):
        self._server = server
        self._ssl = ssl_context
        self._guard = guard
        self._key: str | None = None
        self._inner: asyncio.Protocol | None = None
        self._early: list[bytes] = []

    def connection_made(self, transport) -> None:
        self._key = self._guard.admit(transport)
        if self._key is None:
            return
        # Nothing may be read before start_tls takes the transport: the client's
        # first bytes are its handshake.
        transport.pause_reading()
        asyncio.get_running_loop().create_task(self._handshake(transport))

    async def _handshake(self, raw) -> None:
        if raw.is_closing():
            return  # gone before the handshake began (connection_lost released it)
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                raw,
                self,
                self._ssl,
                server_side=True,
                ssl_handshake_timeout=self._guard.tls_handshake_timeout_s,
            )
        except ConnectionAbortedError:
            # asyncio's (and uvloop's) handshake deadline: the only abort on this path.
            self._guard.count("tls_handshake_timeout", self._key or "")
            self._done()
            return
        except (OSError, ssl.SSLError) as e:
            log.debug("agent port: a TLS handshake failed: %s", e)
            reset(raw)
            self._done()
            return
        if tls is None:
            self._done()  # the client left during the handshake
            return
        inner = self._server._protocol_factory()
        self._inner = inner
        inner.connection_made(tls)
        early, self._early = self._early, []
        for data in early:
            inner.data_received(data)

    def _done(self) -> None:
        if self._key is not None:
            self._guard.release(self._key)
            self._key = None

    # After the handshake the TLS transport calls these; they go to grpclib.

    def data_received(self, data: bytes) -> None:
        inner = self._inner
        if inner is None:
            self._early.append(data)  # came with the handshake's last flight
        else:
            inner.data_received(data)

    def eof_received(self):
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc) -> None:
        self._done()
        if self._inner is not None:
            self._inner.connection_lost(exc)
