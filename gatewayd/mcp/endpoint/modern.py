"""/mcp for 2026-07-28 clients: one self-contained POST per request, no session.

The request is checked on the SDK's own ladder (``find_duplicated_routing_header``,
``classify_inbound_request``): routing headers given twice or disagreeing with
the body are a 400 HeaderMismatch, a version the gateway does not serve is
-32022 naming those it does. HTTP statuses of errors follow the SDK's table
(``ERROR_CODE_HTTP_STATUS``). The caller's "session" is its key: its upstream
connections are filed under ``key:<key_id>``, and its ``subscriptions/listen``
streams carry the list changes of them and of its grants.
"""

from __future__ import annotations

from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    unsupported_protocol_version_rejection,
)
from mcp_types import SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gatewayd.gateway.policy.keys import KeyInfo
from gatewayd.mcp.endpoint import wire
from gatewayd.mcp.endpoint.dispatch import Call, Caller, Dispatcher
from gatewayd.mcp.endpoint.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    RpcError,
    notification_bytes,
    result_bytes,
    rpc_error_bytes,
)
from gatewayd.mcp.endpoint.legacy import INSTRUCTIONS
from gatewayd.mcp.endpoint.progress import Progress
from gatewayd.mcp.endpoint.progress import answer as relay_progress
from gatewayd.mcp.endpoint.streams import Streams
from llmgw import __version__

_NOT_ONE = "the body must be one JSON-RPC request or notification object"
_LISTEN_FLAGS = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")
_SUPPORTED = list(MODERN_PROTOCOL_VERSIONS)


def _status(code: int) -> int:
    return ERROR_CODE_HTTP_STATUS.get(code, 200)


class ModernPath:
    def __init__(self, dispatch: Dispatcher, streams: Streams):
        self.dispatch = dispatch
        self.streams = streams
        self._discover = {
            "supportedVersions": _SUPPORTED,
            "capabilities": {"tools": {"listChanged": True}},
            "instructions": INSTRUCTIONS,
            "resultType": "complete",
            "cacheScope": "private",
            "ttlMs": 0,
            "_meta": {SERVER_INFO_META_KEY: {"name": "llmgw", "version": __version__}},
        }

    async def post(self, req: wire.Request, key: KeyInfo, msg, size: int, receive, send) -> None:
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            await wire.send_error(send, 400, INVALID_REQUEST, _NOT_ONE)
            return
        method = msg.get("method")
        if "id" not in msg:
            if not isinstance(method, str):
                await wire.send_error(send, 400, INVALID_REQUEST, _NOT_ONE)
                return
            # A notification: acknowledged and dropped, once its version is one served.
            rej = unsupported_protocol_version_rejection(
                req.headers.get(MCP_PROTOCOL_VERSION_HEADER, "")
            )
            if rej is not None:
                await self._reject(send, None, rej)
                return
            await wire.send_empty(send, 202)
            return
        req_id = msg["id"]
        if not wire.valid_id(req_id):
            await wire.send_error(
                send, 400, INVALID_REQUEST, "the request's id must be a string or a number"
            )
            return
        params = msg.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            await wire.send_error(send, 400, INVALID_REQUEST, _NOT_ONE, req_id=req_id)
            return
        dup = find_duplicated_routing_header((k.decode("latin-1"), "") for k, _ in req.raw)
        if dup is not None:
            await self._reject(
                send,
                req_id,
                InboundLadderRejection(HEADER_MISMATCH, f"{dup} header appears more than once"),
            )
            return
        verdict = classify_inbound_request(msg, headers=req.headers)
        if isinstance(verdict, InboundLadderRejection):
            await self._reject(send, req_id, verdict)
            return

        caller = Caller(key, "key:" + key.key_id, modern=True)
        if method == "tools/call":
            progress = self.dispatch.progress_for(caller, params, req.headers)
            if progress is not None:
                work = self._outcome(caller, params, req_id, size, progress)
                await relay_progress(send, progress, work, req_id)
                return
            status, body = await self._outcome(caller, params, req_id, size, None)
            await wire.send_bytes(send, status, body)
            return
        if method == "server/discover":
            await wire.send_bytes(send, 200, result_bytes(req_id, self._discover))
            return
        if method == "subscriptions/listen":
            await self._listen(caller, params, req_id, receive, send)
            return
        try:
            body = result_bytes(req_id, await self.dispatch.answer(caller, method, params))
            status = 200
        except RpcError as e:
            body, status = rpc_error_bytes(req_id, e), _status(e.code)
        await wire.send_bytes(send, status, body)

    async def _outcome(
        self, caller: Caller, params: dict, req_id, size: int, progress: Progress | None
    ) -> tuple[int, bytes]:
        """A tools/call's HTTP status and answer, its accounting done."""
        name = params.get("name")
        call = Call("", name if isinstance(name, str) else "")
        status = 200
        try:
            result = await self.dispatch.call_tool(caller, params, call, progress)
            if "resultType" not in result:
                result["resultType"] = (
                    "complete"  # a legacy upstream's answer, as 2026-07-28 has it
                )
            body = result_bytes(req_id, result)
        except RpcError as e:
            body, status = rpc_error_bytes(req_id, e), _status(e.code)
        await self.dispatch.record(caller, call, size, len(body))
        return status, body

    async def _listen(self, caller: Caller, params: dict, req_id, receive, send) -> None:
        wanted = params.get("notifications")
        if not isinstance(wanted, dict):
            e = RpcError(
                INVALID_PARAMS, "subscriptions/listen needs params.notifications, an object"
            )
            await wire.send_bytes(send, _status(e.code), rpc_error_bytes(req_id, e))
            return
        flags = frozenset(f for f in _LISTEN_FLAGS if wanted.get(f) is True)
        stream = self.streams.open(caller.owner, req_id, flags)
        ack = notification_bytes(
            "notifications/subscriptions/acknowledged",
            {"notifications": dict.fromkeys(sorted(flags), True), "_meta": stream.meta()},
        )
        try:
            await wire.pump_sse(
                send, receive, stream.queue, first=wire.sse_frame(ack), last=stream.closing_frame
            )
        finally:
            self.streams.close(stream)

    @staticmethod
    async def _reject(send, req_id, rej: InboundLadderRejection) -> None:
        await wire.send_error(
            send, _status(rej.code), rej.code, rej.message, rej.data, req_id=req_id
        )
