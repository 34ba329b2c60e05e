"""The HTTP+SSE transport (MCP 2024-11-05), which many company servers still speak.

A GET opens an event stream whose first event, `endpoint`, names the address
to POST JSON-RPC messages to; the POSTs are only acknowledged (202) and every
answer comes back on the stream, matched to its request by id. The stream
ending ends the connection: a new one must be opened (Upstream.closed says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

import aiohttp
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from gatewayd.mcp.upstream.errors import (
    UpstreamError,
    UpstreamRpcError,
    describe_body,
    http_status_error,
)
from gatewayd.mcp.upstream.events import (
    CLIENT_INFO,
    cancelled,
    dumps,
    loads,
    read_events,
)
from gatewayd.mcp.upstream.redirects import exchange, send

log = logging.getLogger(__name__)

# Seconds given to telling the server a request was given up on.
CANCEL_NOTICE_S = 5.0

Deliver = Callable[[dict, Callable[[str, dict | None], None] | None], None]


class SseWire:
    """One HTTP+SSE connection: the stream, the address to POST to, the requests awaiting answers."""

    def __init__(
        self, url: str, headers: dict[str, str], http: aiohttp.ClientSession, deliver: Deliver
    ) -> None:
        self.url = url
        self.http = http
        self._deliver = deliver  # the Upstream's: notifications, and requests the server sends
        self._headers = headers
        self._post_headers = {**headers, "Content-Type": "application/json"}
        self._post_url = ""
        self._ids = itertools.count(1)
        self._pending: dict[object, asyncio.Future] = {}
        self._progress: dict[object, Callable[[str, dict | None], None]] = {}
        self._resp: aiohttp.ClientResponse | None = None
        self._reader: asyncio.Task | None = None
        self._spawned: set[asyncio.Task] = set()
        self._ended: UpstreamError | None = None
        self.protocol_version = ""
        self.capabilities: dict = {}
        self.server_info: dict = {}

    @property
    def closed(self) -> bool:
        return self._ended is not None

    async def open(self) -> None:
        headers = {**self._headers, "Accept": "text/event-stream"}
        self._resp = resp = await send(self.http, "GET", self.url, headers=headers)
        if resp.status in (401, 403):
            raise http_status_error(resp.status)
        if resp.status != 200 or resp.content_type != "text/event-stream":
            body = describe_body(await resp.content.read(400))
            raise UpstreamError(
                "protocol",
                f"not an SSE MCP server: GET {self.url} answered {resp.status}"
                f" {resp.content_type or ''}".rstrip()
                + (f" ({body})" if body else ""),
                hint="an address ending in /sse is reached over SSE, any other over streamable HTTP",
            )
        events = read_events(resp)
        first = await anext(events, None)
        if first is None or first[0] != "endpoint":
            raise UpstreamError(
                "protocol", "not an MCP server: its event stream did not start with an endpoint"
            )
        post_url = urljoin(str(resp.url), first[1].strip())
        if urlsplit(post_url)[:2] != urlsplit(self.url)[:2]:
            # A server naming another host would have the gateway send its credentials there.
            raise UpstreamError(
                "protocol", f"the server asked for messages at another address ({post_url})"
            )
        self._post_url = post_url
        self._reader = asyncio.create_task(self._read(events), name=f"mcp-sse-{self.url}")
        params = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": CLIENT_INFO,
        }
        result = await self.request("initialize", params, None)
        version = result.get("protocolVersion")
        if version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise UpstreamError(
                "protocol", f"the server speaks MCP version {version!r}, which the gateway does not"
            )
        self.protocol_version = version
        self.capabilities = result.get("capabilities") or {}
        self.server_info = result.get("serverInfo") or {}
        await self.notify("notifications/initialized", None)

    async def request(self, method: str, params: dict | None, on_note) -> dict:
        if self._ended is not None:
            raise self._ended
        rid = next(self._ids)
        msg: dict = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        token = (
            ((params or {}).get("_meta") or {}).get("progressToken")
            if on_note is not None
            else None
        )
        answer = asyncio.get_running_loop().create_future()
        self._pending[rid] = answer
        if token is not None:
            self._progress[token] = on_note
        try:
            await self.send(msg)
            reply = await answer
        except asyncio.CancelledError:
            if self._ended is None:  # tell the server to stop working on it
                task = asyncio.create_task(
                    self._quietly(self.notify("notifications/cancelled", cancelled(rid)))
                )
                self._spawned.add(task)
                task.add_done_callback(self._spawned.discard)
            raise
        finally:
            self._pending.pop(rid, None)
            if token is not None:
                self._progress.pop(token, None)
        if "error" in reply:
            raise UpstreamRpcError.from_error(reply["error"])
        result = reply.get("result")
        if not isinstance(result, dict):
            raise UpstreamError(
                "protocol", f"not an MCP server: its answer to {method} has no result object"
            )
        return result

    async def notify(self, method: str, params: dict | None) -> None:
        msg: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)

    async def send(self, msg: dict) -> None:
        async with exchange(
            self.http, "POST", self._post_url, headers=self._post_headers, data=dumps(msg)
        ) as resp:
            body = await resp.read()
        if resp.status == 404:
            # The server no longer knows this connection (it restarted): it is over.
            self._end(UpstreamError("closed", "the server no longer knows this connection"))
            raise self._ended
        if resp.status >= 300:
            raise http_status_error(resp.status, body)

    @staticmethod
    async def _quietly(work) -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, UpstreamError):
            async with asyncio.timeout(CANCEL_NOTICE_S):
                await work

    async def close(self) -> None:
        self._end(
            UpstreamError("closed", "the connection to the server was closed; open a new one")
        )
        for task in self._spawned:
            task.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        if self._resp is not None:
            self._resp.close()

    async def _read(self, events) -> None:
        try:
            async for _, data in events:
                msg = loads(data)
                if msg is None:
                    continue
                if "method" in msg:
                    token = (msg.get("params") or {}).get("progressToken")
                    self._deliver(msg, self._progress.get(token) if token is not None else None)
                    continue
                answer = self._pending.get(msg.get("id"))
                if answer is not None and not answer.done():
                    answer.set_result(msg)
            self._end(UpstreamError("closed", "the server ended the event stream"))
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            self._end(UpstreamError("closed", f"the event stream from the server failed: {exc}"))

    def _end(self, error: UpstreamError) -> None:
        if self._ended is None:
            self._ended = error
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(self._ended)
