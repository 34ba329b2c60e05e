"""Accepting TLS connections through a ``PortGuard``: counted before the handshake, timed during it.

asyncio's ``create_server(ssl=…)`` starts each accepted connection's TLS
handshake before anything of ours sees it, for up to 60 s and counted against
no bound. ``TlsListener`` owns the listening socket instead: each connection
is counted by its client as it is accepted (``PortGuard.take``; one past a
bound is reset before any transport is made for it), then handed to the loop
with ``connect_accepted_socket(ssl=…, ssl_handshake_timeout=…)``, and only a
finished handshake reaches the port's protocol. The agent port (grpclib,
tls_gate.py) and the gateway port over HTTPS (uvicorn, tls_http.py) both
accept this way; each gives the protocol a finished connection is handed to.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Protocol

from gatewayd.http.guard import PortGuard, client_key, reset_socket
from gatewayd.http.realaddr import ProxyHeaderError, parse_proxy_header

log = logging.getLogger(__name__)

# Connections the kernel queues before gatewayd accepts them (grpclib's default is 100;
# a flood should be accepted and reset, not crowd clients out of a short queue).
BACKLOG = 2048
# Connections accepted in one turn of the loop, so a flood cannot starve the rest.
ACCEPTS_PER_TURN = 128
# Out of descriptors: accepting again after this long, as asyncio does.
ACCEPT_RETRY_S = 1.0
_OUT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


# The longest PROXY header read before a handshake: v1's 107 bytes, v2's with its TLVs.
PROXY_HEADER_MAX = 536
# A PROXY header come in part is looked at again this often (until header_timeout).
PROXY_HEADER_RECHECK_S = 0.01


class Releasing(Protocol):
    """The protocol a connection's handshake runs under; ``release`` lets its count go."""

    def release(self) -> None: ...


class TlsListener:
    """The listening socket, with what grpclib and uvicorn ask of an ``asyncio.Server``.

    ``protocol(key, source)``: the protocol for a connection of client ``key`` (an
    ``asyncio.Protocol`` with ``release``), made before its handshake; ``source`` is
    the client a trusted proxy's PROXY header named before the handshake (with the
    guard's ``proxy_protocol``; HAProxy's ``send-proxy-v2`` with ``ssl`` sends it
    first), else None.
    """

    def __init__(
        self,
        host: str,
        port: int,
        ctx: ssl.SSLContext,
        guard: PortGuard,
        protocol: Callable[[str, tuple[str, int] | None], Releasing],
        what: str,
    ) -> None:
        self._ctx = ctx
        self._guard = guard
        self._protocol = protocol
        self._what = what
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
                log.warning("%s: out of descriptors (%s); accepting again in 1 s", self._what, e)
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_S, self._resume)
                return
            key = client_key(addr)
            # A trusted proxy carries everyone's connections: its handshakes are not held
            # to one client's bound (the protocol counts each as its client afterwards).
            trusted = self._guard.trusted.trusts(addr[0] if addr else None)
            reason = self._guard.take(key, bounded=not trusted)
            if reason is not None:
                reset_socket(conn)
                self._guard.count(reason, key)
                continue
            task = self._loop.create_task(self._handshake(conn, key, trusted))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _resume(self) -> None:
        if self.sockets:
            self._loop.add_reader(self.sockets[0].fileno(), self._accept)

    async def _handshake(self, conn: socket.socket, key: str, trusted: bool) -> None:
        source = None
        if trusted and self._guard.proxy_protocol:
            try:
                source = await self._proxy_header(conn)
            except (ProxyHeaderError, OSError, TimeoutError) as e:
                log.debug("%s: no PROXY header from the proxy %s: %s", self._what, key, e)
                self._guard.count(
                    "header_timeout" if isinstance(e, TimeoutError) else "proxy_header", key
                )
                self._guard.release(key)
                reset_socket(conn)
                return
            except asyncio.CancelledError:
                self._guard.release(key)
                conn.close()
                raise
        protocol = self._protocol(key, source)
        try:
            await self._loop.connect_accepted_socket(
                lambda: protocol,  # type: ignore[arg-type,return-value]
                conn,
                ssl=self._ctx,
                ssl_handshake_timeout=self._guard.tls_handshake_timeout_s,
            )
        except ConnectionAbortedError:
            # asyncio's (and uvloop's) handshake deadline: the only abort on this path.
            self._guard.count("tls_handshake_timeout", key)
            protocol.release()
        except (OSError, ssl.SSLError) as e:
            log.debug("%s: a TLS handshake failed: %s", self._what, e)
            protocol.release()
        except asyncio.CancelledError:
            protocol.release()
            conn.close()
            raise

    async def _proxy_header(self, conn: socket.socket) -> tuple[str, int] | None:
        """The PROXY header at the start of ``conn``, taken out of it (the TLS handshake's
        bytes after it stay unread); the client it names, None for LOCAL/UNKNOWN."""
        async with asyncio.timeout(self._guard.header_timeout_s):
            while True:
                try:
                    data = conn.recv(PROXY_HEADER_MAX, socket.MSG_PEEK)
                except (BlockingIOError, InterruptedError):
                    data = None
                if data == b"":
                    raise ProxyHeaderError("the connection ended before its PROXY header")
                if data:
                    parsed = parse_proxy_header(data)
                    if parsed is not None:
                        source, used = parsed
                        conn.recv(used)  # there already: peeked
                        return source
                    if len(data) >= PROXY_HEADER_MAX:
                        raise ProxyHeaderError("a PROXY header longer than any proxy sends")
                    await asyncio.sleep(PROXY_HEADER_RECHECK_S)  # the rest is on its way
                    continue
                ready = self._loop.create_future()
                self._loop.add_reader(conn.fileno(), ready.set_result, None)
                try:
                    await ready
                finally:
                    self._loop.remove_reader(conn.fileno())

    def close(self) -> None:
        if self.sockets:
            sock = self.sockets.pop()
            self._loop.remove_reader(sock.fileno())
            sock.close()
        for task in self._tasks:
            task.cancel()  # handshakes not done: nothing to hand over

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
