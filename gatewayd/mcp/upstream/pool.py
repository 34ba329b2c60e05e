"""The gateway's connections to company MCP servers, one per (downstream owner, server).

An owner is what a caller's upstream sessions belong to: the downstream
Mcp-Session-Id of a legacy client, `key:<key_id>` of a 2026-07-28 one. Each owner
gets connections of its own — never another caller's (a server's session state,
its notifications and its view of who is calling stay with one caller) — opened
on first use and kept for every call after, until idle for `idle_s`, dropped
after a failure, or closed with the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from gatewayd.mcp.upstream.client import Notify, Upstream
from gatewayd.mcp.upstream.errors import UpstreamError
from gatewayd.store.mcp_records import McpServerRecord

log = logging.getLogger(__name__)

# Headers of the caller that must never reach a company server whatever a caller of get() passes.
_NEVER_UPSTREAM = {"authorization", "cookie", "proxy-authorization"}


@dataclass
class _Entry:
    upstream: Upstream | None = None
    opening: asyncio.Future | None = None  # the open every concurrent get() of the pair awaits
    used_at: float = 0.0


class UpstreamPool:
    """Upstream connections by owner: one per (owner, server), opened once, reused, closed when idle."""

    def __init__(
        self,
        *,
        get_server: Callable[[str], McpServerRecord | None],
        headers_for: Callable[[str], Awaitable[dict[str, str]]],
        timeout_for: Callable[[McpServerRecord], float],
        idle_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._get_server = get_server
        self._headers_for = headers_for
        self._timeout_for = timeout_for
        self.idle_s = idle_s
        self._clock = clock
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._http: aiohttp.ClientSession | None = None
        self.opened_total = 0  # connections ever opened: tests assert calls never reopen one

    @property
    def http(self) -> aiohttp.ClientSession:
        """The one aiohttp session every Upstream of the pool uses (its connection pool)."""
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                # Owners must not share anything a server hands out: no cookie jar.
                cookie_jar=aiohttp.DummyCookieJar(),
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0),
                timeout=aiohttp.ClientTimeout(total=None),
                auto_decompress=True,
            )
        return self._http

    async def get(
        self,
        owner: str,
        server: str,
        *,
        caller: dict[str, str],
        on_notification: Notify | None = None,
    ) -> Upstream:
        """The owner's connection to `server`, opened on first use; concurrent calls share one open."""
        key = (owner, server)
        entry = self._entries.get(key)
        if entry is not None:
            up = entry.upstream
            if up is not None and not up.closed:
                entry.used_at = self._clock()
                if on_notification is not None:
                    up.on_notification = on_notification
                return up
        else:
            entry = self._entries[key] = _Entry()
        if entry.opening is None:
            # First use, or it closed (an SSE server ended its stream): open afresh.
            stale, entry.upstream = entry.upstream, None
            entry.opening = asyncio.ensure_future(
                self._open(key, entry, caller, on_notification, stale)
            )
            # Read here too, so an open whose every caller gave up leaves no unread exception.
            entry.opening.add_done_callback(lambda f: f.cancelled() or f.exception())
        # Shielded: a caller that gives up must not cancel the open the others wait on.
        return await asyncio.shield(entry.opening)

    async def _open(
        self,
        key: tuple[str, str],
        entry: _Entry,
        caller: dict[str, str],
        notify: Notify | None,
        stale: Upstream | None,
    ) -> Upstream:
        owner, server = key
        if stale is not None:
            await self._close_entry(_Entry(upstream=stale))
        try:
            rec = self._get_server(server)
            if rec is None:
                raise UpstreamError("connect", "no company MCP server of that name is configured")
            headers = dict(await self._headers_for(server))
            headers.update({k: v for k, v in caller.items() if k.lower() not in _NEVER_UPSTREAM})
            up = Upstream(
                rec.name,
                rec.url,
                rec.transport,
                headers,
                self._timeout_for(rec),
                http=self.http,
                on_notification=notify,
            )
            await up.open()
        except BaseException:
            if self._entries.get(key) is entry:
                del self._entries[key]
            raise
        finally:
            entry.opening = None
        if self._entries.get(key) is not entry:
            # Dropped (or the owner closed) while it opened: nobody may use it now.
            await up.close()
            raise UpstreamError("closed", "the connection was dropped while it opened")
        self.opened_total += 1
        entry.upstream = up
        entry.used_at = self._clock()
        log.debug("opened MCP server %s for %s (%s)", server, owner, up.protocol_version)
        return up

    async def drop(self, owner: str, server: str) -> None:
        """Forget the owner's connection to `server` (after a transport failure): the next get() reopens."""
        entry = self._entries.pop((owner, server), None)
        await self._close_entry(entry)

    async def drop_server(self, server: str) -> None:
        """Forget every owner's connection to `server` (its address or credentials changed)."""
        await self._close_all([k for k in self._entries if k[1] == server])

    async def close_owner(self, owner: str) -> None:
        """A downstream session ended: close its connections."""
        await self._close_all([k for k in self._entries if k[0] == owner])

    def owners(self, server: str) -> list[str]:
        """The owners holding a connection to `server`."""
        return [o for (o, s), e in self._entries.items() if s == server and e.upstream is not None]

    async def close_idle(self) -> int:
        """Close connections unused for idle_s (none with a call in flight); returns how many."""
        cutoff = self._clock() - self.idle_s
        idle = [
            k
            for k, e in self._entries.items()
            if e.upstream is not None and e.used_at <= cutoff and e.upstream.in_flight == 0
        ]
        await self._close_all(idle)
        return len(idle)

    async def run(self) -> None:
        """Close idle connections, forever (a task of the gateway)."""
        while True:
            await asyncio.sleep(max(1.0, min(self.idle_s / 4, 30.0)))
            try:
                closed = await self.close_idle()
            except Exception:  # the sweep must go on; the next one retries
                log.exception("closing idle MCP connections failed")
                continue
            if closed:
                log.debug("closed %d idle MCP connections", closed)

    async def close(self) -> None:
        await self._close_all(list(self._entries))
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _close_all(self, keys: list[tuple[str, str]]) -> None:
        entries = [self._entries.pop(k, None) for k in keys]
        await asyncio.gather(*(self._close_entry(e) for e in entries))

    @staticmethod
    async def _close_entry(entry: _Entry | None) -> None:
        if entry is not None and entry.upstream is not None:
            with contextlib.suppress(Exception):
                await entry.upstream.close()
