"""How the PostgreSQL store reaches the member that takes writes, among one or several.

A DSN may list every member of a replicated cluster, as Patroni users write
it: ``postgresql://u:p@h1:5432,h2:5432/llmgw?target_session_attrs=read-write``
(or the libpq form ``?host=h1,h2&port=5432,5432``). ``MemberDialer`` is the
pool's way to make a connection: it dials the members in turn, each for at
most ``DIAL_TIMEOUT_S``, keeps the first that is neither in recovery nor
read-only, and starts with the one that took writes last time. The store
always needs the writable member, whatever ``target_session_attrs`` says.

Every TCP connection it hands out has keepalive and TCP_USER_TIMEOUT set, so
the connections to a machine that vanished (power, network) are closed by
the kernel within ``DEAD_PEER_S`` instead of the minutes TCP's defaults take;
the pool then makes new ones, to whichever member leads by then.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg

log = logging.getLogger(__name__)


class _InWords(logging.Filter):
    """asyncpg's pool logs a failed reconnect with its traceback (a store failing over,
    a member away): kept as one line, the error in words at its end."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {_words(record.exc_info[1])}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


logging.getLogger("asyncpg.pool").addFilter(_InWords())


def quiet_shielded_releases(loop: asyncio.AbstractEventLoop) -> None:
    """One log line, not asyncio's traceback, for a pool connection whose release failed
    after whoever released it had gone.

    asyncpg releases a connection under ``asyncio.shield``: when the statement's caller
    is cancelled (a store timeout, a control plane stopping), the release goes on alone,
    and the reset it runs can then fail too (a store frozen or failing over). asyncpg has
    closed that connection already and the pool makes a new one; nothing is lost, but
    nobody retrieves the error, and asyncio logs it with a traceback ("Task exception
    was never retrieved"), as for a bug. Other contexts go to the handler set before.
    """
    previous = loop.get_exception_handler()
    if getattr(previous, "quiets_pool_releases", False):
        return

    def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        task = context.get("future") or context.get("task")
        exc = context.get("exception")
        get_coro = getattr(task, "get_coro", None)
        coro = get_coro() if get_coro is not None else None
        if exc is not None and getattr(coro, "__qualname__", "") == "PoolConnectionHolder.release":
            log.warning(
                "store: a connection could not be made ready again after a statement was cut"
                " short (%s); it is closed, and the pool makes a new one",
                f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
            )
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler.quiets_pool_releases = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)

# 3 s per member: a member on the same network answers in milliseconds, and
# a powered-off one must not hold up the others (it once cost 45 s of hanging
# requests when the whole connect shared one timeout and the dead one came first).
DIAL_TIMEOUT_S = 3.0
# A dead peer is noticed within about 10 s: 4 s idle, then a probe every 2 s;
# TCP_USER_TIMEOUT ends the connection once 10 s pass with nothing acknowledged,
# probes and statements alike.
KEEPALIVE_IDLE_S = 4
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 3
DEAD_PEER_S = 10
DEFAULT_PORT = 5432


@dataclass(frozen=True)
class Member:
    """One address of the DSN: a host (or a unix socket folder) and its port."""

    host: str
    port: int

    def __str__(self) -> str:
        if self.host.startswith("/"):
            return f"{self.host} (port {self.port})"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class NoWritableMember(ConnectionError):
    """No member of the DSN could be used for writes just now; says why for each."""


def _split_hostspec(spec: str) -> list[tuple[str, str]]:
    """``h1:5432,[::1]:5433,h3`` into (host, port-or-empty) pairs."""
    out = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            out.append((host, rest.removeprefix(":")))
        elif item.count(":") == 1:
            host, _, port = item.partition(":")
            out.append((host, port))
        else:
            out.append((item, ""))  # a bare host, or an IPv6 address without brackets
    return out


def members_of(dsn: str) -> list[Member]:
    """The members a DSN names, in its order; empty when it names none (libpq's defaults)."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    hostspec = unquote(parts.netloc.rpartition("@")[2])
    pairs = _split_hostspec(hostspec)
    if not pairs and query.get("host"):
        pairs = [(h, "") for h in query["host"][-1].split(",") if h]
    if not pairs:
        return []
    # Ports given apart (?port=5432,5433 or PGPORT): one for all, or one per host.
    fallback = [p for p in query.get("port", [os.environ.get("PGPORT", "")])[-1].split(",") if p]
    members = []
    for i, (host, port) in enumerate(pairs):
        if not port and fallback:
            port = fallback[i] if len(fallback) == len(pairs) else fallback[0]
        try:
            members.append(Member(host, int(port) if port else DEFAULT_PORT))
        except ValueError:
            raise ValueError(f"port {port!r} of host {host!r} is not a number") from None
    return members


def set_dead_peer_options(conn: asyncpg.Connection) -> bool:
    """Keepalive and TCP_USER_TIMEOUT on the connection's socket; False for a unix socket."""
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ("TCP_USER_TIMEOUT", DEAD_PEER_S * 1000),
    ):
        option = getattr(socket, name, None)
        if option is not None:  # Linux has them all; others keep what they have
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
    return True


async def takes_writes(conn: asyncpg.Connection) -> str:
    """Why the member takes no writes, in words; empty when it does."""
    settings = conn.get_settings()
    # PostgreSQL 14+ reports both at login: no round trip. Older ones are asked.
    standby = getattr(settings, "in_hot_standby", None)
    if standby is None:
        standby = "on" if await conn.fetchval("SELECT pg_catalog.pg_is_in_recovery()") else "off"
    if standby == "on":
        return "is a standby (in recovery)"
    if getattr(settings, "default_transaction_read_only", "off") == "on":
        return "is read-only (default_transaction_read_only)"
    return ""


class MemberDialer:
    """The pool's connect hook: a connection to the writable member, or NoWritableMember."""

    def __init__(
        self, dsn: str, *, dial_timeout_s: float = DIAL_TIMEOUT_S, tls: ssl.SSLContext | None = None
    ) -> None:
        self.dsn = dsn
        # A DSN asking for TLS: the context that checks the server (postgres/tls.py).
        self.tls = tls
        self.members = members_of(dsn)
        self.dial_timeout_s = dial_timeout_s
        # Where writes went last: tried first, so a new connection costs one dial.
        self._last_good = 0
        self.last_member: Member | None = None

    def _order(self) -> list[int]:
        n = len(self.members)
        return [(self._last_good + i) % n for i in range(n)]

    async def __call__(self, *args, **kwargs) -> asyncpg.Connection:
        # The pool passes the DSN it was made with and its connection options.
        kwargs.pop("dsn", None)
        kwargs["timeout"] = self.dial_timeout_s
        # Each member is judged here, not by asyncpg's own multi-host logic,
        # whose one timeout covers them all.
        kwargs["target_session_attrs"] = "any"
        if self.tls is not None:
            kwargs["ssl"] = self.tls
        if not self.members:
            conn = await asyncpg.connect(self.dsn, **kwargs)
            set_dead_peer_options(conn)
            return conn
        why: list[str] = []
        errors: list[BaseException] = []
        for i in self._order():
            member = self.members[i]
            try:
                conn = await asyncpg.connect(self.dsn, host=member.host, port=member.port, **kwargs)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
                why.append(f"{member} {_words(e)}")
                errors.append(e)
                continue
            try:
                refusal = await takes_writes(conn)
            except BaseException:
                conn.terminate()
                raise
            if refusal:
                conn.terminate()
                why.append(f"{member} {refusal}")
                continue
            set_dead_peer_options(conn)
            if i != self._last_good or self.last_member is None:
                log.info("store: writing to PostgreSQL member %s", member)
            self._last_good, self.last_member = i, member
            return conn
        failure = _none_usable(why, errors)
        if failure in errors:
            raise failure
        raise failure from (errors[0] if errors else None)


def _none_usable(why: list[str], errors: list[BaseException]) -> BaseException:
    """What to raise when no member took writes: the server's own error where every
    member said the same (a refused login, a missing database: the store maps those
    to their own advice), one member's network error as it was, else the list of why."""
    if errors and len(errors) == len(why):
        first = errors[0]
        same = all(type(e) is type(first) for e in errors)
        if (same and isinstance(first, asyncpg.PostgresError)) or len(errors) == 1:
            return first
    return NoWritableMember("no member takes writes: " + "; ".join(why))


def _words(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return f"did not answer within {DIAL_TIMEOUT_S:.0f} s"
    if isinstance(e, ConnectionRefusedError):
        return "refused the connection"
    if isinstance(e, asyncpg.CannotConnectNowError):
        return f"is starting or stopping ({e})"
    return f"could not be used: {e or type(e).__name__}"
