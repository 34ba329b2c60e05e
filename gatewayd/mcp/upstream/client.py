"""One connection from the gateway to one company MCP server, for one downstream owner.

Streamable HTTP is spoken here in both generations: 2026-07-28 first (stateless:
`server/discover`, then self-contained POSTs carrying the version, method and
name headers and the `_meta` envelope), and where a server refuses that, the
session handshake at 2025-11-25 (initialize, Mcp-Session-Id, a GET stream for
notifications, DELETE on close). The HTTP+SSE transport lives in sse.py.

Why not the SDK's Client: measured on loopback, a proxy built on it added 4-8 ms
a call (pydantic models both ways, anyio streams, a task per message). Here a
call is one aiohttp POST, json.dumps out and json.loads in.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable

import aiohttp
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
)

from gatewayd.mcp.upstream.errors import (
    UpstreamError,
    UpstreamRpcError,
    http_status_error,
    timeout_error,
    transport_error,
)
from gatewayd.mcp.upstream.events import (
    CLIENT_INFO,
    answer_to_server_request,
    cancelled,
    dumps,
    loads,
    read_events,
)
from gatewayd.mcp.upstream.redirects import exchange
from gatewayd.mcp.upstream.sse import SseWire

log = logging.getLogger(__name__)

Notify = Callable[[str, dict | None], None]

MODERN = LATEST_MODERN_VERSION  # "2026-07-28"
HANDSHAKE = LATEST_HANDSHAKE_VERSION  # "2025-11-25"
ACCEPT_BOTH = "application/json, text/event-stream"
# Seconds between attempts to reopen a notification stream that ended, doubling to the cap.
STREAM_RETRY_S, STREAM_RETRY_MAX_S = 1.0, 30.0
ANSWER_STREAM_END_S = 0.5
# Seconds a request waits when no timeout was given (the pool always gives the server's).
DEFAULT_TIMEOUT_S = 30.0
# The most tools/list pages read before deciding the server's cursor never ends.
MAX_PAGES = 1000
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
_NOT_RELAYED = (None, "notifications/subscriptions/acknowledged")
# Header names the server's configuration cannot set: the transport owns them.
_OWN_HEADERS = {
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "content-type",
    "accept",
}


class Upstream:
    """ONE connection to one company MCP server for one downstream owner; never shared."""

    def __init__(
        self,
        name: str,
        url: str,
        transport: str,
        headers: dict[str, str],
        timeout_s: float,
        *,
        http: aiohttp.ClientSession,
        on_notification: Notify | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self.transport = transport
        self.timeout_s = timeout_s if timeout_s > 0 else DEFAULT_TIMEOUT_S
        self.http = http
        self.on_notification = on_notification
        self.protocol_version = ""
        self.capabilities: dict = {}
        self.server_info: dict = {}
        # Requests awaiting their answer: the pool never closes a busy connection as idle.
        self.in_flight = 0
        own = {k: v for k, v in headers.items() if k.lower() not in _OWN_HEADERS}
        self._headers = {**own, "Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
        self._ids = itertools.count(1)
        self._modern = False
        self._session_id: str | None = None
        self._call_headers: dict[str, str] = self._headers  # legacy: + version and session id
        self._meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        self._reinit = asyncio.Lock()
        self._stream: asyncio.Task | None = None  # the GET stream or subscriptions/listen
        # Set once the server's notification stream is open (never, if it offers none).
        self.notifications_ready = asyncio.Event()
        self._spawned: set[asyncio.Task] = set()
        # Seconds to wait for an answer stream's end after the answer (0: the server never ends them).
        self._drain_s = ANSWER_STREAM_END_S
        self._closed = False
        self._sse = SseWire(url, own, http, self._deliver) if transport == "sse" else None

    @property
    def closed(self) -> bool:
        """True once closed, or once the server ended the connection (SSE): open a new one."""
        return self._closed or (self._sse is not None and self._sse.closed)

    @property
    def session_id(self) -> str | None:
        """The server's Mcp-Session-Id (legacy streamable HTTP), else None."""
        return self._session_id

    async def open(self) -> None:
        """Connect and negotiate: 2026-07-28 where the server speaks it, else the handshake."""
        try:
            async with asyncio.timeout(self.timeout_s):
                if self._sse is not None:
                    await self._sse.open()
                    self.protocol_version = self._sse.protocol_version
                    self.capabilities, self.server_info = (
                        self._sse.capabilities,
                        self._sse.server_info,
                    )
                elif not await self._discover():
                    await self._initialize()
        except asyncio.CancelledError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            err = self._as_upstream_error(exc, self.timeout_s)
            if err is exc:
                raise
            raise err from exc
        if self.on_notification is not None and self._sse is None:
            self._start_stream()

    async def request(
        self,
        method: str,
        params: dict | None = None,
        *,
        timeout_s: float | None = None,
        on_notification: Notify | None = None,
    ) -> dict:
        """The result of `method`; a JSON-RPC error answer raises UpstreamRpcError.

        Notifications that come with the answer (progress) go to `on_notification`
        if given, else to the Upstream's own.
        """
        if self.closed:
            raise UpstreamError("closed", "the connection to the server was closed; open a new one")
        timeout_s = timeout_s or self.timeout_s
        self.in_flight += 1
        try:
            async with asyncio.timeout(timeout_s):
                if self._sse is not None:
                    answer = await self._sse.request(method, params, on_notification)
                else:
                    answer = await self._call(method, params, on_notification)
        except Exception as exc:
            err = self._as_upstream_error(exc, timeout_s)
            if err is exc:
                raise
            raise err from exc
        finally:
            self.in_flight -= 1
        return answer

    async def list_tools(self) -> list[dict]:
        """Every tool the server lists, all pages read."""
        tools: list[dict] = []
        cursor = None
        for _ in range(MAX_PAGES):
            result = await self.request("tools/list", {"cursor": cursor} if cursor else None)
            page = result.get("tools")
            if not isinstance(page, list):
                raise UpstreamError(
                    "protocol", "not an MCP server: its tools/list answer has no tools list"
                )
            tools.extend(t for t in page if isinstance(t, dict))
            cursor = result.get("nextCursor")
            if not cursor:
                return tools
        raise UpstreamError("protocol", f"its tools/list never ends (over {MAX_PAGES} pages)")

    async def notify(self, method: str, params: dict | None = None) -> None:
        """Send a notification (no answer comes back)."""
        if self._sse is not None:
            await self._sse.notify(method, params)
            return
        msg: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        headers = self._modern_headers(method, params) if self._modern else self._call_headers
        async with exchange(self.http, "POST", self.url, headers=headers, data=dumps(msg)) as resp:
            await resp.read()

    async def close(self) -> None:
        """End the connection: the streams stop, a legacy session is DELETEd (best effort)."""
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._stream, *self._spawned) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._sse is not None:
            await self._sse.close()
        elif self._session_id is not None:
            # A server keeps a forgotten session until its idle timeout; tell it now.
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, UpstreamError):
                async with asyncio.timeout(min(self.timeout_s, 2.0)):
                    headers = {k: v for k, v in self._call_headers.items() if k != "Content-Type"}
                    async with exchange(self.http, "DELETE", self.url, headers=headers) as resp:
                        await resp.read()

    # -- negotiation ------------------------------------------------------------------

    async def _discover(self) -> bool:
        """Ask for 2026-07-28; False where the server refuses it (then the handshake follows)."""
        msg = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "server/discover",
            "params": {"_meta": self._meta},
        }
        status, answer, raw = await self._post(
            dumps(msg), self._modern_headers("server/discover", None), msg["id"]
        )
        if status in (401, 403):
            raise http_status_error(status, raw)
        result = answer.get("result") if answer is not None and status == 200 else None
        # A server from before 2026-07-28 answers 400/404/405 (version or session
        # refused) or a JSON-RPC error (-32601 method not found, -32022 version).
        if not isinstance(result, dict) or MODERN not in (result.get("supportedVersions") or ()):
            return False
        self._modern = True
        self.protocol_version = MODERN
        self.capabilities = result.get("capabilities") or {}
        self.server_info = (result.get("_meta") or {}).get(
            "io.modelcontextprotocol/serverInfo"
        ) or {}
        return True

    async def _initialize(self) -> None:
        params = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": CLIENT_INFO}
        msg = {"jsonrpc": "2.0", "id": next(self._ids), "method": "initialize", "params": params}
        status, answer, raw, headers = await self._post_with_headers(
            dumps(msg), self._headers, msg["id"]
        )
        result = _result_of(status, answer, raw, "initialize")
        version = result.get("protocolVersion")
        if version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise UpstreamError(
                "protocol", f"the server speaks MCP version {version!r}, which the gateway does not"
            )
        self.protocol_version = version
        self.capabilities = result.get("capabilities") or {}
        self.server_info = result.get("serverInfo") or {}
        self._session_id = headers.get("mcp-session-id")
        self._call_headers = {**self._headers, "mcp-protocol-version": version}
        if self._session_id is not None:
            self._call_headers["mcp-session-id"] = self._session_id
        await self.notify("notifications/initialized")

    async def _reinitialize(self, stale: str | None) -> None:
        """The server forgot session `stale` (404): a new session, once, shared by every request that saw it."""
        async with self._reinit:
            if self._session_id != stale:
                return  # another request has made the new session already
            log.info("MCP server %s forgot session %s; starting a new one", self.name, stale)
            if self._stream is not None:
                self._stream.cancel()
                self._stream = None
            self._session_id = None
            await self._initialize()
            if self.on_notification is not None:
                self._start_stream()

    # -- calls --------------------------------------------------------------------------

    def _modern_headers(self, method: str, params: dict | None) -> dict[str, str]:
        headers = {**self._headers, "mcp-protocol-version": MODERN, "mcp-method": method}
        if params:
            # The routing name the server checks against the body (2026-07-28 Mcp-Name).
            name = (
                params.get("uri")
                if method in ("resources/read", "resources/subscribe")
                else params.get("name")
            )
            if isinstance(name, str) and method in ("tools/call", "prompts/get", "resources/read"):
                headers["mcp-name"] = name
        return headers

    async def _call(self, method: str, params: dict | None, on_note: Notify | None) -> dict:
        rid = next(self._ids)
        msg: dict = {"jsonrpc": "2.0", "id": rid, "method": method}
        if self._modern:
            params = dict(params) if params else {}
            meta = params.get("_meta")
            params["_meta"] = {**meta, **self._meta} if isinstance(meta, dict) else self._meta
            headers = self._modern_headers(method, params)
        else:
            headers = self._call_headers
        if params is not None:
            msg["params"] = params
        payload = dumps(msg)
        session = self._session_id
        try:
            status, answer, raw = await self._post(payload, headers, rid, on_note)
            if status == 404 and session is not None:
                await self._reinitialize(session)
                status, answer, raw = await self._post(payload, self._call_headers, rid, on_note)
        except asyncio.CancelledError:
            # Timed out or given up: a 2026-07-28 server stops when the POST is cut; a
            # session's server would keep running the tool unless told.
            if not self._modern and not self._closed:
                self._spawn(self.notify("notifications/cancelled", cancelled(rid)))
            raise
        return _result_of(status, answer, raw, method)

    async def _post(
        self, payload: bytes, headers: dict, rid: object, on_note: Notify | None = None
    ):
        status, answer, raw, _ = await self._post_with_headers(payload, headers, rid, on_note)
        return status, answer, raw

    async def _post_with_headers(
        self, payload: bytes, headers: dict, rid: object, on_note: Notify | None = None
    ):
        """POST one request: (status, the answer message or None, the raw body, the headers)."""
        async with exchange(self.http, "POST", self.url, headers=headers, data=payload) as resp:
            if resp.content_type == "text/event-stream":
                answer = await self._answer_in_events(resp, rid, on_note)
                return resp.status, answer, b"", resp.headers
            raw = await resp.read()
            return resp.status, loads(raw) if raw else None, raw, resp.headers

    async def _answer_in_events(self, resp: aiohttp.ClientResponse, rid: object, on_note) -> dict:
        """The answer in an event stream, and what the server sends before it."""
        events = read_events(resp)
        async for _, data in events:
            msg = loads(data)
            if msg is None:
                continue
            if "method" in msg:
                self._deliver(msg, on_note)
            elif msg.get("id") == rid:
                break
        else:
            raise UpstreamError("closed", "the server ended its answer stream before answering")
        if self._drain_s:
            # Servers end the stream after the answer (the spec's SHOULD): read to its end
            # so the connection goes back to the pool. Left unread, aiohttp closes it, and
            # every call paid a new connection (147 in 200 calls; p50 7.8 ms, not 1.7).
            try:
                async with asyncio.timeout(self._drain_s):
                    async for _, data in events:
                        late = loads(data)
                        if late is not None and "method" in late:
                            self._deliver(late, on_note)
            except TimeoutError:
                log.info(
                    "MCP server %s keeps answer streams open; not waiting for their end", self.name
                )
                self._drain_s = 0.0
        return msg

    # -- notifications ------------------------------------------------------------------

    def _deliver(self, msg: dict, on_note: Notify | None = None) -> None:
        """A message the server sent on its own: a notification, or a request to answer."""
        if "id" in msg:
            self._spawn(self._answer(answer_to_server_request(msg)))
            return
        callback = on_note or self.on_notification
        if callback is None:
            return
        try:
            callback(msg["method"], msg.get("params"))
        except Exception:  # a failing listener must not end the stream for the others
            log.exception("a listener of MCP server %s failed on %s", self.name, msg.get("method"))

    def _spawn(self, work) -> None:
        """Run `work` beside the caller, best effort (close() cancels what is left)."""

        async def quietly() -> None:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, UpstreamError):
                async with asyncio.timeout(self.timeout_s):
                    await work

        task = asyncio.create_task(quietly())
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    async def _answer(self, answer: dict) -> None:
        if self._sse is not None:
            await self._sse.send(answer)
            return
        async with exchange(
            self.http, "POST", self.url, headers=self._call_headers, data=dumps(answer)
        ) as resp:
            await resp.read()

    def _start_stream(self) -> None:
        if self._modern:
            if (self.capabilities.get("tools") or {}).get("listChanged"):
                self._stream = asyncio.create_task(self._listen(), name=f"mcp-listen-{self.name}")
        elif self._session_id is not None:
            self._stream = asyncio.create_task(
                self._get_stream(self._session_id), name=f"mcp-get-{self.name}"
            )

    async def _listen(self) -> None:
        """2026-07-28: subscriptions/listen, whose answer is the stream of change notifications."""
        params = {"notifications": {"toolsListChanged": True}, "_meta": self._meta}
        msg = {
            "jsonrpc": "2.0",
            "id": "listen-1",
            "method": "subscriptions/listen",
            "params": params,
        }
        headers = self._modern_headers("subscriptions/listen", params)
        await self._keep_streaming(
            lambda: exchange(self.http, "POST", self.url, headers=headers, data=dumps(msg))
        )

    async def _get_stream(self, session: str) -> None:
        """Legacy: the session's GET stream (a server may refuse it with 405: it then sends nothing)."""
        headers = {k: v for k, v in self._call_headers.items() if k != "Content-Type"}
        headers["Accept"] = "text/event-stream"
        await self._keep_streaming(lambda: exchange(self.http, "GET", self.url, headers=headers))

    async def _keep_streaming(self, open_stream) -> None:
        """Read a notification stream; reopen it when it ends while the connection lives.

        A reopened stream may have missed a change (there is no replay), so it is
        followed by a tools/list_changed of our own: listeners refetch.
        """
        retry_s, first = STREAM_RETRY_S, True
        while not self._closed:
            try:
                async with open_stream() as resp:
                    if resp.status != 200 or resp.content_type != "text/event-stream":
                        log.debug(
                            "MCP server %s offers no notification stream (%s)",
                            self.name,
                            resp.status,
                        )
                        return
                    self.notifications_ready.set()
                    if not first:
                        self._deliver({"method": "notifications/tools/list_changed"})
                    first, retry_s = False, STREAM_RETRY_S
                    async for _, data in read_events(resp):
                        msg = loads(data)
                        # A listen stream opens with its acknowledgement: nothing to relay.
                        if msg is not None and msg.get("method") not in _NOT_RELAYED:
                            self._deliver(_without_subscription_id(msg))
            except UpstreamError as exc:  # a redirect it was not followed to
                log.info("MCP server %s offers no notification stream: %s", self.name, exc)
                return
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                log.debug("the notification stream of MCP server %s failed: %s", self.name, exc)
            await asyncio.sleep(retry_s)
            retry_s = min(retry_s * 2, STREAM_RETRY_MAX_S)

    def _as_upstream_error(self, exc: Exception, timeout_s: float) -> Exception:
        if isinstance(exc, UpstreamError | UpstreamRpcError):
            return exc
        if isinstance(exc, TimeoutError):
            return timeout_error(timeout_s)
        if isinstance(exc, aiohttp.ClientError | OSError):
            return transport_error(exc, self.url)
        if isinstance(exc, ValueError):
            return UpstreamError("protocol", f"not an MCP server: {exc}")
        return exc


def _without_subscription_id(msg: dict) -> dict:
    """A listen stream's notification as any other: the id of our subscription is ours alone."""
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and SUBSCRIPTION_ID in meta:
        meta = {k: v for k, v in meta.items() if k != SUBSCRIPTION_ID}
        params = {k: v for k, v in params.items() if k != "_meta"}
        if meta:
            params["_meta"] = meta
        msg = {**msg, "params": params or None}
    return msg


def _result_of(status: int, answer: dict | None, raw: bytes, method: str) -> dict:
    """The result object of an answer, or the error it stands for."""
    if status in (401, 403):
        raise http_status_error(status, raw)
    if answer is not None:
        if "error" in answer:
            raise UpstreamRpcError.from_error(answer["error"])
        result = answer.get("result")
        if isinstance(result, dict) and status < 400:
            return result
    if status >= 400:
        raise http_status_error(status, raw)
    text = raw[:120].decode("utf-8", "replace").strip()
    raise UpstreamError(
        "protocol", f"not an MCP server: its answer to {method} is not JSON-RPC ({text or 'empty'})"
    )
