"""What the store keeps for the MCP gateway: company servers, grants, and a row per tool call.

A server's credentials are not in its record: the record names, per header, the
ref of a sealed secret (``mcp/hr/3f9a…``), and the sealed bytes live apart in
``mcp_secrets`` (gatewayd.mcp.seal opens them). A call row never holds the
call's arguments or its result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

TRANSPORTS = ("streamable_http", "sse")

# How a call ended, as McpCallRow.status and the usage groups name it.
CALL_STATUSES = (
    "ok",
    "tool_error",  # the tool answered isError: true
    "error",  # the server answered a JSON-RPC error
    "not_found",  # no such tool, or not granted (the caller cannot tell which)
    "rate_limited",
    "unavailable",  # breaker open, or no connection
    "timeout",
)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class McpServerRecord:
    """A company MCP server the gateway serves to granted keys."""

    name: str
    url: str
    transport: str  # "streamable_http" | "sse"
    description: str = ""
    enabled: bool = True
    # Sent as given; not secret (shown by ctl mcp show).
    headers: dict[str, str] = field(default_factory=dict)
    # Header name -> ref of its sealed value; only the names are ever shown.
    secret_refs: dict[str, str] = field(default_factory=dict)
    # 0: mcp.default_timeout_s.
    timeout_s: float = 0.0
    # Calls a minute one key may make to this server; 0: no limit.
    rate_per_minute: int = 0
    # The store keeps the first created_at of a name; both default to now.
    created_at: datetime = field(default_factory=_now)
    updated_at: datetime = field(default_factory=_now)


@dataclass(frozen=True)
class McpGrantRecord:
    """One grant: ``scope`` may call ``target``.

    scope: ``key:key_…``, ``org:A``, ``team:A/t`` or ``project:A/t/p``.
    target: ``hr`` (every tool of it) or ``hr.lookup``; the server may be ``llmgw:admin``.
    """

    scope: str
    target: str
    created_at: datetime


@dataclass(frozen=True)
class McpCallRow:
    """One tools/call through /mcp: who, what, how it ended, how long, how big."""

    at: datetime
    key_id: str
    project: str
    server: str
    tool: str  # bare ("lookup")
    status: str  # one of CALL_STATUSES
    latency_ms: float
    bytes_in: int  # the request body
    bytes_out: int  # the answer relayed
    # Unique per row, given by the MCP call journal: the store keeps a row id once,
    # so a row replayed after a crash is not counted twice. "" for rows never journaled.
    row_id: str = ""
