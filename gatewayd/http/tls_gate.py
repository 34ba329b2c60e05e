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
import errno
import logging
import socket
import ssl

from grpclib.server import Server

from gatewayd.http.guard import PortGuard, client_key, reset_socket

log = logging.getLogger(__name__)

# Connections the kernel queues before gatewayd accepts them (grpclib's default is 100;
# a flood should be accepted and reset, not crowd agents out of a short queue).
BACKLOG = 2048
# Connections accepted in one turn of the loop, so a flood cannot starve the rest.
ACCEPTS_PER_TURN = 128
# Out of descriptors: accepting again after this long, as asyncio does.
ACCEPT_RETRY_S = 1.0
_OUT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class GuardedServer(Server):
    """grpclib's ``Server``, accepting through a ``PortGuard`` and finishing TLS itself."""

    async def start_guarded(
        self, host: str, port: int, *, ssl_context: ssl.SSLContext, guard: PortGuard
    ) -> None:
        loop = asyncio.get_running_loop()
        # grpclib's close() and wait_closed() use these two attributes as after start().
        self._server = _Listener(self, host, port, ssl_context, guard)
        self._server_closed_fut = loop.create_future()


class _Listener:
    """The listening socket, with what grpclib asks of an ``asyncio.Server``."""

    def __init__(self, server: Server, host: str, port: int, ctx: ssl.SSLContext, guard):
        self._grpc = server
        self._ctx = ctx
        self._guard = guard
        self._loop = asyncio.get_running_loop()
        if ":" in host:  # "::" serves IPv4 clients too where the system can
            sock = socket.create_server(
                (host, port),
                family=socket.AF_INET6,
                backlog=BACKLOG,
                dualstack_ipv6=host == "::" and socket.has_dualstack_ipv6(),
            )
        else:
            sock = socket.create_server((host or "0.0.0.0", port), backlog=BACKLOG)
        sock.setblocking(False)
        self.sockets = [sock]
        self._tasks: set[asyncio.Task] = set()
        self._loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        sock = self.sockets[0]
        for _ in range(ACCEPTS_PER_TURN):
            try:
                conn, addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno not in _OUT_OF:
                    raise
                log.warning("agent port: out of descriptors (%s); accepting again in 1 s", e)
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_S, self._resume)
                return
            key = client_key(addr)
            reason = self._guard.take(key)
            if reason is not None:
                reset_socket(conn)
                self._guard.count(reason, key)
                continue
            task = self._loop.create_task(self._handshake(conn, key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _resume(self) -> None:
        if self.sockets:
            self._loop.add_reader(self.sockets[0].fileno(), self._accept)

    async def _handshake(self, conn: socket.socket, key: str) -> None:
        counted = _Counted(self._grpc._protocol_factory, self._guard, key)
        try:
            await self._loop.connect_accepted_socket(
                lambda: counted,
                conn,
                ssl=self._ctx,
                ssl_handshake_timeout=self._guard.tls_handshake_timeout_s,
            )
        except ConnectionAbortedError:
            # asyncio's (and uvloop's) handshake deadline: the only abort on this path.
            self._guard.count("tls_handshake_timeout", key)
            counted.release()
        except (OSError, ssl.SSLError) as e:
            log.debug("agent port: a TLS handshake failed: %s", e)
            counted.release()
        except asyncio.CancelledError:
            counted.release()
            conn.close()
            raise

    def close(self) -> None:
        if self.sockets:
            sock = self.sockets.pop()
            self._loop.remove_reader(sock.fileno())
            sock.close()
        for task in self._tasks:
            task.cancel()  # handshakes not done: nothing to hand grpclib

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


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
