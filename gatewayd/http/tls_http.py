"""The gateway port over TLS (server.yaml ``http.tls_*``), its handshakes bounded like the rest.

uvicorn given a certificate hands it to asyncio's ``create_server``, where a
connection's TLS handshake runs before any protocol of ours sees it: counted
against no bound, for up to asyncio's 60 s. One client could hold as many
half-finished handshakes as it has descriptors. Here, as on the agent port
(``tls_gate.py``), the listening socket is ours: each connection is counted
by its client when accepted (``PortGuard.take``; one past a bound is reset at
once), its handshake must finish within ``connections.tls_handshake_timeout``
(late ones are counted and closed), and only then is it given to uvicorn's
protocol — the guarded one, which counts it from there on: the handshake's
count is let go in the same call, so the bound holds throughout. From a
trusted proxy with ``http.proxy_protocol``, the PROXY header that comes before
the handshake (HAProxy's ``send-proxy-v2`` with ``ssl``) is read first
(tls_accept.py), and the connection is counted as the client it names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

import uvicorn

from gatewayd.http.guard import PortGuard
from gatewayd.http.tls_accept import TlsListener

log = logging.getLogger(__name__)


def https_context(cert: str, key: str) -> ssl.SSLContext:
    """The gateway port's certificate, for clients' HTTPS (no client certificates asked)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


class TlsUvicorn(uvicorn.Server):
    """uvicorn serving through a ``HandshakeListener`` (no signal handling of its own)."""

    def __init__(self, config: uvicorn.Config, ctx: ssl.SSLContext, guard: PortGuard) -> None:
        super().__init__(config)
        self._ctx = ctx
        self._guard = guard

    @contextlib.contextmanager
    def capture_signals(self):
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await self.lifespan.startup()
        config = self.config

        def create_protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        guard = self._guard
        self.servers = [  # type: ignore[list-item]
            TlsListener(
                config.host,
                config.port,
                self._ctx,
                guard,
                lambda key, source: _Handover(create_protocol, guard, key, source),
                "http port",
            )
        ]
        self.started = True


class _Handover(asyncio.Protocol):
    """A connection whose handshake is done, given to uvicorn's (guarded) protocol.

    The count taken at accept is let go just before the guarded protocol takes its
    own, in the same call: nothing runs between the two.
    """

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        guard: PortGuard,
        key: str,
        source: tuple[str, int] | None = None,
    ):
        self._factory = factory
        self._guard = guard
        self._key: str | None = key
        # The client a trusted proxy's PROXY header named before the handshake.
        self._source = source
        self._inner: asyncio.Protocol | None = None

    def release(self) -> None:
        if self._key is not None:
            self._guard.release(self._key)
            self._key = None

    def connection_made(self, transport) -> None:
        self.release()
        inner = self._inner = self._factory()
        with contextlib.suppress(NotImplementedError, AttributeError):
            transport.set_protocol(inner)
        inner.connection_made(transport)
        # A proxied protocol waiting for its PROXY header: it came before the handshake.
        before_tls = getattr(inner, "header_before_tls", None)
        if before_tls is not None:
            before_tls(self._source)

    # Where the transport could not take the inner protocol itself, each call is passed on.
    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)  # type: ignore[union-attr]

    def eof_received(self):
        return self._inner.eof_received()  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        self._inner.pause_writing()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self._inner.resume_writing()  # type: ignore[union-attr]

    def connection_lost(self, exc) -> None:
        self.release()
        if self._inner is not None:
            self._inner.connection_lost(exc)
