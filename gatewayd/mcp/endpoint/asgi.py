"""McpEndpoint: the ASGI app behind ``/mcp`` on the gateway port.

In order: the caller's llmgw key (401 with ``WWW-Authenticate``), its Origin
(403), the body within ``mcp.max_body_bytes`` (413 saying so), JSON (400
parse error); then the request goes to the 2026-07-28 adapter when it carries
an ``MCP-Protocol-Version`` that no handshake uses (the SDK server routes the
same way), else to the session-based one. Nothing a client sends is answered
with a 5xx: an unexpected failure is logged and answered as a JSON-RPC
internal error.
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import UTC, datetime

from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gatewayd.gateway.policy.keys import KeyCache, KeyInfo
from gatewayd.mcp.endpoint import wire
from gatewayd.mcp.endpoint.dispatch import Dispatcher
from gatewayd.mcp.endpoint.errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR
from gatewayd.mcp.endpoint.legacy import LegacyPath
from gatewayd.mcp.endpoint.modern import ModernPath
from gatewayd.mcp.endpoint.streams import Streams
from gatewayd.mcp.runtime import McpRuntime

log = logging.getLogger(__name__)

_ALLOW_ALL = [(b"allow", b"GET, POST, DELETE")]
_ALLOW_POST = [(b"allow", b"POST")]


class Refused(Exception):
    def __init__(self, status: int, message: str, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class McpEndpoint:
    def __init__(self, rt: McpRuntime, keys: KeyCache):
        self.rt = rt
        self.keys = keys
        self.max_body_bytes = rt.cfg.max_body_bytes
        origins = set(rt.cfg.allowed_origins)
        self.any_origin = "*" in origins
        self.origins = {o.rstrip("/").lower() for o in origins}
        self.streams = Streams()
        self.dispatch = Dispatcher(rt, self.streams)
        self.legacy = LegacyPath(self.dispatch, self.streams, rt.cfg.session_idle_s)
        self.modern = ModernPath(self.dispatch, self.streams)

    def tools_changed(self) -> None:
        """Servers or grants changed (the registry's on_change): every stream is told."""
        self.streams.broadcast()

    async def run(self) -> None:
        await self.legacy.run()

    def close(self) -> None:
        self.streams.end_all()

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self._handle(scope, receive, send)
        except Refused as r:
            await wire.send_error(send, r.status, INVALID_REQUEST, r.message, headers=r.headers)
        except wire.BodyTooLarge:
            await wire.send_error(
                send,
                413,
                INVALID_REQUEST,
                f"the body is over the {wire.size_words(self.max_body_bytes)} /mcp takes"
                " (mcp.max_body_bytes)",
            )
        except Exception:
            log.exception("answering an /mcp request failed")
            # Answered only if nothing was sent yet: uvicorn refuses a second start.
            with contextlib.suppress(RuntimeError, OSError):
                await wire.send_error(
                    send, 200, INTERNAL_ERROR, "the gateway failed on this request"
                )

    async def _handle(self, scope, receive, send) -> None:
        req = wire.Request(scope)
        key = self._authenticate(req)
        self._check_origin(req)
        method = req.method
        version = req.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        if method == "POST":
            body = await wire.read_body(receive, req.headers, self.max_body_bytes)
            try:
                msg = json.loads(body)
            except (ValueError, RecursionError):
                await wire.send_error(send, 400, PARSE_ERROR, "Parse error: the body is not JSON")
                return
            if modern:
                await self.modern.post(req, key, msg, len(body), receive, send)
            else:
                await self.legacy.post(req, key, msg, len(body), send)
        elif method in ("GET", "DELETE"):
            if modern:
                # 2026-07-28 has no standing stream and no session to end.
                await wire.send_empty(send, 405, _ALLOW_POST)
            elif method == "GET":
                await self.legacy.get(req, key, receive, send)
            else:
                await self.legacy.delete(req, key, send)
        else:
            await wire.send_empty(send, 405, _ALLOW_ALL)

    def _authenticate(self, req: wire.Request) -> KeyInfo:
        auth = req.headers.get("authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        if not token:
            raise _unauthorized("no API key: send your llmgw key as 'Authorization: Bearer <key>'")
        info = self.keys.lookup(token)
        if info is None:
            raise _unauthorized("this API key is not valid")
        refusal = info.refusal(datetime.now(UTC))
        if refusal:
            raise _unauthorized(refusal)
        return info

    def _check_origin(self, req: wire.Request) -> None:
        origin = req.headers.get("origin")
        if origin is None or self.any_origin:
            return
        o = origin.rstrip("/").lower()
        if o in self.origins:
            return
        host = req.headers.get("host", "").lower()
        if host and o in (f"http://{host}", f"https://{host}"):
            return
        raise Refused(
            403,
            f"requests from the origin {origin[:200]!r} are not let through;"
            " add it to mcp.allowed_origins in server.yaml if it is yours",
        )


def _unauthorized(message: str) -> Refused:
    challenge = f'Bearer realm="llmgw", error="invalid_token", error_description="{message}"'
    return Refused(401, message, [(b"www-authenticate", challenge.encode())])
