"""Bounds on the connections of gatewayd's public ports: none can be held down by one client.

One client holding 19,990 half-sent requests on loopback once took the gateway
down: nothing closed a connection that never finished its headers, so gatewayd
reached its open-files limit and refused /health and every request until the
client let go. Here every connection a port accepts is:

- **counted**, per client address (per port) and in total (the whole process:
  the limit that matters is its open files). Past either bound a new connection
  is accepted and reset at once: its descriptor is free again within the same
  loop iteration, and the client learns at once. Not accepting instead would
  leave it in the kernel's queue in front of everyone else's connections.
  An IPv6 client is counted by its /64, since one host can hold all of it.
- **timed**: a request's headers must be whole ``header_timeout`` after the
  connection opened (or after the previous answer on a kept-alive one), each
  read of its body must bring bytes within ``body_read_timeout``, and a
  kept-alive connection with no next request is closed after
  ``keepalive_timeout``. Late ones are reset; resets and refusals are counted
  in ``llmgw_connections_refused_total{port, reason}``.

The HTTP side is uvicorn's httptools protocol with a few hooks. The hot path
keeps uvicorn's own timer work (one timer armed after each answer, one
cancelled): the deadline is one timer per connection that, when it fires,
looks at where the connection is (waiting for headers, reading a body,
answering, idle) and either closes it or sleeps again for what is left. Nothing
is re-armed per request or per read.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import select
import time

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmgw.config import ConnectionsConfig
from llmgw.connbounds import AddressCounts, TrustedProxies, client_key, reset, reset_socket

# client_key, reset and reset_socket are the shared piece's, named here too for the agent port.
__all__ = [
    "ConnectionBudget",
    "GuardedHttpProtocol",
    "PortGuard",
    "client_key",
    "open_files_limit",
    "reset",
    "reset_socket",
    "total_within",
    "unread",
]

log = logging.getLogger(__name__)

# Descriptors kept for the gateway's own work beyond its client connections:
# the store, agents' streams, engine connections being opened, logs, the
# admin port. Each client connection with a request in flight holds an engine
# connection too, so clients get half of what is left.
FD_RESERVE = 512
# The least total any limit leaves clients (a tiny ulimit still serves).
MIN_TOTAL = 64
# A deadline met with bytes still unread in the socket looks again this much later.
UNREAD_RECHECK_S = 0.05
UNREAD_RECHECKS = 3
# One log line at most this often per port while connections are refused.
REFUSAL_LOG_INTERVAL_S = 60.0

REASONS = (
    "per_address",
    "total",
    "header_timeout",
    "body_timeout",
    "tls_handshake_timeout",
    # A trusted proxy's connection that did not start with a PROXY header we can read.
    "proxy_header",
)


def open_files_limit() -> int:
    """The process's open-files limit, its soft limit first raised to the hard one.

    Go does the same at start: a soft limit of 1,024 is a relic that caps a
    server at a few hundred clients for no reason.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


def total_within(max_total: int, open_files: int) -> int:
    """``max_total`` lowered where the open-files limit could not hold it with the reserve."""
    return min(max_total, max(MIN_TOTAL, (open_files - FD_RESERVE) // 2))


def unread(transport) -> bool:
    """Whether bytes (or the peer's end) wait in the connection's socket, not yet read."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return False


class ConnectionBudget:
    """Client connections open in the whole process, against one bound."""

    def __init__(self, max_total: int):
        self.max_total = max_total
        self.open = 0

    @classmethod
    def for_process(cls, cfg: ConnectionsConfig) -> ConnectionBudget:
        limit = open_files_limit()
        total = total_within(cfg.max_total, limit)
        if total < cfg.max_total:
            # Info, not a warning: at the default 10,000 it is what most machines need.
            log.info(
                "connections.max_total %d lowered to %d: the open-files limit is %d "
                "(raise it with ulimit -n or LimitNOFILE= to allow more)",
                cfg.max_total,
                total,
                limit,
            )
        return cls(total)


class PortGuard:
    """One port's bounds: connections per client, the shared total, deadlines, counts."""

    def __init__(
        self,
        port: str,
        cfg: ConnectionsConfig,
        budget: ConnectionBudget,
        metrics=None,
        *,
        trusted: TrustedProxies | None = None,
        proxy_protocol: bool = False,
    ):
        self.port = port
        # Proxies whose word on the client is believed (server.yaml http:); none by default.
        self.trusted = trusted or TrustedProxies()
        self.proxy_protocol = proxy_protocol
        self.budget = budget
        self.header_timeout_s = cfg.header_timeout
        self.body_read_timeout_s = cfg.body_read_timeout
        self.keepalive_timeout_s = cfg.keepalive_timeout
        self.tls_handshake_timeout_s = cfg.tls_handshake_timeout
        # Open connections by client (llmgw/connbounds.py, shared with the mirror).
        self.per_address = AddressCounts(cfg.max_per_address)
        self.open = 0
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)
        # Series made when first counted, as the gateway's other metrics: none sit at zero.
        self._metrics = metrics
        self._counters: dict = {}
        if metrics is not None:
            metrics.connections_open.labels(port).set_function(lambda: self.open)
        self._logged_at = 0.0
        self._unlogged = 0

    @property
    def max_per_address(self) -> int:
        return self.per_address.max_per_address

    def admit(self, transport) -> str | None:
        """The client's key when this connection may stay; otherwise it is reset, and None."""
        key = client_key(transport.get_extra_info("peername"))
        reason = self.take(key)
        if reason is None:
            return key
        reset(transport)
        self.count(reason, key)
        return None

    def take(self, key: str, *, bounded: bool = True) -> str | None:
        """Count one more connection of ``key``; None if it may stay, else the bound it is past.

        ``bounded=False`` counts a trusted proxy's connection before it names its
        client: the proxy carries everyone's, so its own bound would be everyone's.
        """
        budget = self.budget
        if budget.open >= budget.max_total:
            return "total"
        if bounded:
            if not self.per_address.take(key):
                return "per_address"
        else:
            self.per_address[key] = self.per_address.get(key, 0) + 1
        self.open += 1
        budget.open += 1
        return None

    def rekey(self, old: str, new: str) -> bool:
        """Count a connection held as ``old`` as ``new`` (the client a proxy named) from now on.

        False past ``new``'s bound: it is still held as ``old`` then (and
        released as that when the caller's reset ends it).
        """
        if not self.per_address.take(new):
            return False
        self.per_address.release(old)
        return True

    def release(self, key: str) -> None:
        self.per_address.release(key)
        self.open -= 1
        self.budget.open -= 1

    def count(self, reason: str, key: str) -> None:
        """A connection refused or closed late, counted; logged once a minute at most."""
        self.refused[reason] += 1
        counter = self._counters.get(reason)
        if counter is None and self._metrics is not None:
            counter = self._counters[reason] = self._metrics.connections_refused.labels(
                self.port, reason
            )
        if counter is not None:
            counter.inc()
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= REFUSAL_LOG_INTERVAL_S:
            log.warning(
                "%s port: %d connection(s) refused or closed late since the last report "
                "(the latest from %s: %s; held now %d, by that client %d; "
                "bounds in server.yaml connections:)",
                self.port,
                self._unlogged,
                key,
                reason.replace("_", " "),
                self.open,
                self.per_address.held(key),
            )
            self._logged_at, self._unlogged = now, 0

    def http_protocol(self) -> type[HttpToolsProtocol]:
        """uvicorn's ``http=`` protocol class for this port.

        With no proxy trusted (the default) it is the plain guarded protocol: no
        look at PROXY headers or X-Forwarded-For, no work per request for them.
        """
        base: type[GuardedHttpProtocol] = GuardedHttpProtocol
        if self.trusted:
            from gatewayd.http.proxied import ProxiedHttpProtocol

            base = ProxiedHttpProtocol
        return type(f"GuardedHttp_{self.port}", (base,), {"guard": self})


# uvicorn's own callbacks, called straight (no super() lookup on the per-request path).
_on_body = HttpToolsProtocol.on_body
_on_response_complete = HttpToolsProtocol.on_response_complete


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, bounded and timed by a ``PortGuard`` (set per port)."""

    guard: PortGuard

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Set here, with uvicorn's own, so instances keep one shared layout of
        # attributes (CPython's fast attribute access on the hot path needs it).
        self._key: str | None = None
        # Loop time the wait on the client began: the connection opened, or the last answer.
        self._since = 0.0
        # Loop time the last bytes of a request body came.
        self._read_at = 0.0
        # Deadlines put off since the last answer because bytes waited unread.
        self._rechecks = 0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        guard = self.guard
        self._key = self._admit(transport)
        if self._key is None:
            return  # reset: uvicorn never sees it
        super().connection_made(transport)
        # uvicorn arms this after each answer; the first look is the earlier of
        # the two deadlines an answered connection can miss.
        self.timeout_keep_alive = min(guard.keepalive_timeout_s, guard.header_timeout_s)
        self._since = self.loop.time()
        self.timeout_keep_alive_task = self.loop.call_later(guard.header_timeout_s, self._check)

    def _admit(self, transport) -> str | None:
        """The key this connection is counted as, or None where it was reset."""
        return self.guard.admit(transport)

    def connection_lost(self, exc) -> None:
        if self._key is None:
            return
        self.guard.release(self._key)
        self._key = None
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        super().connection_lost(exc)

    def _unset_keepalive_if_required(self) -> None:
        # uvicorn cancels its idle timer on every read; here that timer is the
        # connection's deadline and runs on into the next request's headers.
        pass

    def on_body(self, body: bytes) -> None:
        self._read_at = self.loop.time()
        _on_body(self, body)

    def on_response_complete(self) -> None:
        task = self.timeout_keep_alive_task
        if task is not None:
            task.cancel()
            self.timeout_keep_alive_task = None
        self._since = self.loop.time()
        self._rechecks = 0
        _on_response_complete(self)  # arms the idle timer, or starts a pipelined request
        if self.timeout_keep_alive_task is None and not self.transport.is_closing():
            # A pipelined request started: its body, if any, is still timed.
            self.timeout_keep_alive_task = self.loop.call_later(
                self.guard.body_read_timeout_s, self._check
            )

    def timeout_keep_alive_handler(self) -> None:
        self._check()

    def _check(self) -> None:
        """The deadline: close the connection if it is late for what it owes, else wait on."""
        self.timeout_keep_alive_task = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        guard, cycle, now = self.guard, self.cycle, self.loop.time()
        if cycle is None or cycle.response_complete:
            if cycle is not None and self.scope is cycle.scope:
                # Answered, and not one byte of another request since: idle.
                due, reason = self._since + guard.keepalive_timeout_s, ""
                if now >= due:
                    if self._came_unread():
                        return
                    transport.close()  # an ordinary end: a FIN, not counted
                    return
                # Bytes may come before then; their headers are due by the other deadline.
                headers_due = self._since + guard.header_timeout_s
                if headers_due > now:
                    due = min(due, headers_due)
            else:
                due, reason = self._since + guard.header_timeout_s, "header_timeout"
        elif cycle.more_body:
            if self.flow.read_paused:
                # The app has not taken what came: the wait is not the client's.
                due, reason = now + guard.body_read_timeout_s, ""
            else:
                due = max(self._read_at, self._since) + guard.body_read_timeout_s
                reason = "body_timeout"
        else:
            return  # the request is whole and being answered: nothing waits on the client
        if now < due:
            self.timeout_keep_alive_task = self.loop.call_later(due - now, self._check)
            return
        if self._came_unread():
            return
        guard.count(reason, self._key or "")
        reset(transport)

    def _came_unread(self) -> bool:
        """Bytes the client sent wait unread: look again once they are read.

        After a stall (the process stopped, the loop held up), the loop runs
        its due timers before it reads what came meanwhile: the client was on
        time, and a request sent on a kept-alive connection would be dropped
        unanswered. The socket is looked at only when a deadline is met.
        """
        if not unread(self.transport):
            return False
        self.timeout_keep_alive_task = self.loop.call_later(UNREAD_RECHECK_S, self._check)
        return True
