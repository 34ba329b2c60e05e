"""/mcp for session-based clients (protocol 2024-11-05 … 2025-11-25).

``initialize`` opens a session bound to the caller's key and answers its id in
``Mcp-Session-Id``; every later request carries it (none: 400; unknown, ended,
expired or another key's: 404, which tells the client to start again).
Notifications and posted responses are accepted (202). GET opens the session's
notification stream; DELETE ends the session and closes its upstream
connections. A session unused for ``mcp.session_idle_s`` ends the same way.
The session id is the owner of the session's upstream connections: never
shared with another session, never reopened per call.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from gatewayd.gateway.policy.keys import KeyInfo
from gatewayd.mcp.endpoint import wire
from gatewayd.mcp.endpoint.dispatch import Call, Caller, Dispatcher
from gatewayd.mcp.endpoint.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    RpcError,
    error_bytes,
    result_bytes,
    rpc_error_bytes,
)
from gatewayd.mcp.endpoint.progress import Progress
from gatewayd.mcp.endpoint.progress import answer as relay_progress
from gatewayd.mcp.endpoint.streams import Stream, Streams
from llmgw import __version__

log = logging.getLogger(__name__)

SESSION_HEADER = "mcp-session-id"
# Open sessions one key may hold; past it, initialize ends the key's least recently used.
MAX_SESSIONS_PER_KEY = 256
INSTRUCTIONS = (
    "Tools of your organisation's MCP servers that your llmgw key was granted, named SERVER.TOOL."
)


class Session:
    __slots__ = ("key_id", "last_used", "sid", "stream", "version")

    def __init__(self, sid: str, key_id: str, version: str, now: float):
        self.sid, self.key_id, self.version, self.last_used = sid, key_id, version, now
        self.stream: Stream | None = None


class LegacyPath:
    def __init__(self, dispatch: Dispatcher, streams: Streams, idle_s: float, clock=time.monotonic):
        self.dispatch = dispatch
        self.streams = streams
        self.idle_s = idle_s
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self._by_key: dict[str, set[str]] = {}

    # --- POST ------------------------------------------------------------------

    async def post(self, req: wire.Request, key: KeyInfo, msg, size: int, send) -> None:
        if isinstance(msg, list):
            # Batches left the protocol in 2025-06-18; one message per POST.
            await wire.send_error(send, 400, INVALID_REQUEST, "send one JSON-RPC message per POST")
            return
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            await wire.send_error(send, 400, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
            return
        method = msg.get("method")
        has_id = "id" in msg
        req_id = msg.get("id")
        if method is None and has_id and ("result" in msg or "error" in msg):
            await wire.send_empty(send, 202)  # an answer to a request the gateway never sends
            return
        if not isinstance(method, str) or (has_id and not wire.valid_id(req_id)):
            await wire.send_error(
                send, 400, INVALID_REQUEST, "not a JSON-RPC request or notification"
            )
            return
        if method == "initialize" and has_id:
            await self._initialize(key, msg, req_id, send)
            return
        session = await self._session(req, key, send)
        if session is None:
            return
        if not has_id:
            await wire.send_empty(send, 202)  # notifications/initialized, cancelled, …
            return
        params = msg.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            await wire.send_bytes(
                send, 200, error_bytes(req_id, INVALID_PARAMS, "params must be an object")
            )
            return
        caller = Caller(key, session.sid, modern=False)
        if method == "tools/call":
            progress = self.dispatch.progress_for(caller, params, req.headers)
            if progress is not None:
                work = self._outcome(caller, params, req_id, size, progress)
                await relay_progress(send, progress, work, req_id)
                return
            _, body = await self._outcome(caller, params, req_id, size)
            await wire.send_bytes(send, 200, body)
            return
        try:
            body = result_bytes(req_id, await self.dispatch.answer(caller, method, params))
        except RpcError as e:
            body = rpc_error_bytes(req_id, e)
        await wire.send_bytes(send, 200, body)

    async def _outcome(
        self, caller: Caller, params: dict, req_id, size: int, progress: Progress | None = None
    ) -> tuple[int, bytes]:
        """A tools/call's answer, its accounting done (JSON-RPC errors go with HTTP 200 here)."""
        name = params.get("name")
        call = Call("", name if isinstance(name, str) else "")
        try:
            body = result_bytes(
                req_id, await self.dispatch.call_tool(caller, params, call, progress)
            )
        except RpcError as e:
            body = rpc_error_bytes(req_id, e)
        await self.dispatch.record(caller, call, size, len(body))
        return 200, body

    async def _initialize(self, key: KeyInfo, msg: dict, req_id, send) -> None:
        params = msg.get("params")
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        version = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        mine = self._by_key.setdefault(key.key_id, set())
        if len(mine) >= MAX_SESSIONS_PER_KEY:
            # A client that initializes again and again without DELETE: its oldest
            # session goes, so one key cannot fill the gateway's memory.
            await self.end(min((self.sessions[s] for s in mine), key=lambda x: x.last_used))
        sid = secrets.token_hex(16)
        self.sessions[sid] = Session(sid, key.key_id, version, self.clock())
        mine.add(sid)
        result = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "llmgw", "version": __version__},
            "instructions": INSTRUCTIONS,
        }
        await wire.send_bytes(
            send, 200, result_bytes(req_id, result), [(b"mcp-session-id", sid.encode())]
        )

    async def _session(self, req: wire.Request, key: KeyInfo, send) -> Session | None:
        """The request's live session, or None once the refusal was sent."""
        sid = req.headers.get(SESSION_HEADER)
        if not sid:
            await wire.send_error(
                send,
                400,
                INVALID_REQUEST,
                "no Mcp-Session-Id header: start with initialize, then send the id it answers",
            )
            return None
        session = self.sessions.get(sid)
        if session is None or session.key_id != key.key_id:
            # Another key's session is answered as no session: ids are not probed.
            await wire.send_error(
                send, 404, INVALID_REQUEST, "no such MCP session (it ended): initialize again"
            )
            return None
        session.last_used = self.clock()
        return session

    # --- GET and DELETE --------------------------------------------------------

    async def get(self, req: wire.Request, key: KeyInfo, receive, send) -> None:
        session = await self._session(req, key, send)
        if session is None:
            return
        if session.stream is not None and not session.stream.ended:
            await wire.send_error(
                send, 409, INVALID_REQUEST, "this session's notification stream is already open"
            )
            return
        stream = session.stream = self.streams.open(session.sid)
        try:
            await wire.pump_sse(send, receive, stream.queue)
        finally:
            self.streams.close(stream)
            if session.stream is stream:
                session.stream = None
            session.last_used = self.clock()

    async def delete(self, req: wire.Request, key: KeyInfo, send) -> None:
        session = await self._session(req, key, send)
        if session is None:
            return
        await self.end(session)
        await wire.send_empty(send, 200)

    async def end(self, session: Session) -> None:
        if self.sessions.pop(session.sid, None) is None:
            return
        mine = self._by_key.get(session.key_id)
        if mine is not None:
            mine.discard(session.sid)
            if not mine:
                del self._by_key[session.key_id]
        self.streams.end_owner(session.sid)
        await self.dispatch.rt.pool.close_owner(session.sid)

    # --- idle sessions ---------------------------------------------------------

    async def expire_idle(self) -> int:
        """End sessions unused for idle_s (an open stream is use); how many ended."""
        cutoff = self.clock() - self.idle_s
        idle = [
            s
            for s in self.sessions.values()
            if s.last_used < cutoff and (s.stream is None or s.stream.ended)
        ]
        for s in idle:
            await self.end(s)
        return len(idle)

    async def run(self) -> None:
        every_s = min(30.0, self.idle_s / 2)
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.expire_idle()
            except Exception:
                log.exception("ending idle MCP sessions failed; trying again")

    def close(self) -> None:
        self.streams.end_all()
