"""The JSON-RPC errors /mcp answers, and the bytes of its answers.

Codes the JSON-RPC and MCP specifications define come from ``mcp_types``; the
gateway's own (rate, breaker, timeout) sit in the implementation-defined range
-32000..-32099 next to them. Answers are built with ``json.dumps`` straight
into bytes: no model is validated per request on the hot path.
"""

from __future__ import annotations

import json

from mcp_types.jsonrpc import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

__all__ = [
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "RATE_LIMITED",
    "TIMED_OUT",
    "UNAVAILABLE",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "RpcError",
    "error_bytes",
    "notification_bytes",
    "result_bytes",
    "unknown_tool",
]

# A key's calls to a server are over its rate (data: retryAfterSeconds, server).
RATE_LIMITED = -32001
# The server's breaker is open, or no connection to it could be made.
UNAVAILABLE = -32002
# The server did not answer within its timeout.
TIMED_OUT = -32003

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class RpcError(Exception):
    """A JSON-RPC error to answer with; ``status`` is the call's accounting status."""

    def __init__(self, code: int, message: str, data: object = None, *, status: str = "error"):
        super().__init__(message)
        self.code, self.message, self.data, self.status = code, message, data, status

    def body(self) -> dict:
        err: dict = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


def unknown_tool(name: str) -> RpcError:
    """The one answer for a tool that is absent, ungranted or on a server turned off:
    the caller cannot tell which (an ungranted tool must look like no tool)."""
    return RpcError(INVALID_PARAMS, f"Unknown tool: {name}", status="not_found")


def result_bytes(req_id, result: dict) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": req_id, "result": result}).encode()


def error_bytes(req_id, code: int, message: str, data: object = None) -> bytes:
    err: dict = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return _dumps({"jsonrpc": "2.0", "id": req_id, "error": err}).encode()


def rpc_error_bytes(req_id, e: RpcError) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": req_id, "error": e.body()}).encode()


def notification_bytes(method: str, params: dict | None = None) -> bytes:
    msg: dict = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return _dumps(msg).encode()
