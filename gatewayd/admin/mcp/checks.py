"""What the MCP admin RPCs check and compute: header names and values, limits, usage groups.

Kept apart from the RPCs (gatewayd/admin/mcp/servers.py) so that each rule reads on its own.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

import aiohttp
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.store.mcp_records import McpCallRow, McpGrantRecord, McpServerRecord
from llmgw.errors import LlmgwError
from llmgw.mcp.names import McpNameRefused, origin_of
from proto.llmgw.v1 import McpGrantView, McpUsageGroup

# What PutMcpServerRequest.set may name on a change.
SETTABLE = (
    "url",
    "description",
    "headers",
    "secret_headers",
    "timeout_s",
    "rate_per_minute",
    "enabled",
)
USAGE_BY = {
    "server": "server",
    "tool": "tool",
    "key": "key_id",
    "project": "project",
    "status": "status",
}
# Changes after which a server's open connections and breaker are not its own any more.
RECONNECT = frozenset({"url", "headers", "secret_headers", "enabled", "timeout_s"})
# A server's own timeout may not be longer than this (an hour).
MAX_TIMEOUT_S = 3600.0

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
# Headers the gateway itself sets on every upstream request (protocol, routing,
# the caller's identity): a server's configuration may not send its own.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
    }
)
# Credentials: shown by name only either way, but kept sealed only when given as such.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})


def iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


def refused(e: McpNameRefused) -> GRPCError:
    return GRPCError(Status.INVALID_ARGUMENT, str(e))


def server_of(target: str) -> str:
    # "hr" / "hr.lookup" / "llmgw:admin.list_nodes": the name never holds a '.'.
    return target.partition(".")[0]


def grant_view(g: McpGrantRecord) -> McpGrantView:
    return McpGrantView(scope=g.scope, target=g.target, created_at=iso(g.created_at))


def check_headers(headers: dict[str, str], *, secret: bool) -> dict[str, str]:
    """Header names a server may be given, values without line breaks; refused in words."""
    kind = "sealed header" if secret else "header"
    out: dict[str, str] = {}
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise GRPCError(Status.INVALID_ARGUMENT, f"{name!r} is not a valid HTTP header name")
        low = name.lower()
        if low in _RESERVED_HEADERS or low.startswith("x-llmgw-"):
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"{name} is set by the gateway itself on every request; it cannot be given",
            )
        if any(c in value for c in "\r\n\0"):
            raise GRPCError(Status.INVALID_ARGUMENT, f"the {kind} {name}'s value has a line break")
        if secret and not value.strip():
            raise GRPCError(Status.INVALID_ARGUMENT, f"the {kind} {name} is empty: give its value")
        if not secret and low in _CREDENTIAL_HEADERS:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"{name} carries a credential: give it with --bearer-file or"
                f" --header-file {name}=FILE, so that it is kept sealed",
            )
        if low in {n.lower() for n in out}:
            raise GRPCError(Status.INVALID_ARGUMENT, f"the header {name} is given twice")
        out[name] = value
    return out


def moved_credentials(old: McpServerRecord, new: McpServerRecord, fields: set[str]) -> list[str]:
    """The sealed headers a change must drop: all of them where the address moved to
    another origin (scheme, host, port) and no new ones were given with it."""
    if "url" not in fields or "secret_headers" in fields or not new.secret_refs:
        return []
    if origin_of(old.url) == origin_of(new.url):
        return []
    return sorted(new.secret_refs)


def check_limits(timeout_s: float, rate_per_minute: int) -> None:
    if not 0 <= timeout_s <= MAX_TIMEOUT_S:
        raise GRPCError(
            Status.INVALID_ARGUMENT,
            f"the timeout must be from 0 (mcp.default_timeout_s) to {MAX_TIMEOUT_S:g} s,"
            f" not {timeout_s:g}",
        )
    if rate_per_minute < 0:
        raise GRPCError(
            Status.INVALID_ARGUMENT,
            f"the rate is calls a minute per caller (0: no limit), not {rate_per_minute}",
        )


def p99(values: list[float]) -> float:
    """The 99th percentile by nearest rank: the latency 99 % of the calls took at most."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def usage_groups(rows: list[McpCallRow], by: list[str]) -> list[McpUsageGroup]:
    groups: dict[tuple[str, ...], list[McpCallRow]] = {}
    for r in rows:
        groups.setdefault(tuple(getattr(r, USAGE_BY[b]) for b in by), []).append(r)
    out = []
    for values, members in groups.items():
        latencies = [r.latency_ms for r in members]
        out.append(
            McpUsageGroup(
                group=dict(zip(by, values, strict=True)),
                calls=len(members),
                errors=sum(1 for r in members if r.status != "ok"),
                latency_ms_avg=sum(latencies) / len(latencies),
                latency_ms_p99=p99(latencies),
                bytes_in=sum(r.bytes_in for r in members),
                bytes_out=sum(r.bytes_out for r in members),
            )
        )
    out.sort(key=lambda g: (-g.calls, tuple(g.group.values())))
    return out


def failure_words(e: Exception, rec: McpServerRecord) -> str:
    """What went wrong reaching the server, for the person who typed ctl mcp test."""
    if isinstance(e, LlmgwError):  # UpstreamError: the client's words, and what to do
        hint = (e.hint or "").replace("NAME", rec.name)
        return e.message + (f"; {hint}" if hint else "")
    code = getattr(e, "code", None)
    if isinstance(code, int):  # UpstreamRpcError: the server's own JSON-RPC error
        return f"it answered tools/list with an error: {getattr(e, 'message', e)} (code {code})"
    if isinstance(e, aiohttp.ClientError | OSError):
        return f"could not talk to {rec.url}: {e or type(e).__name__}"
    return f"it did not answer as an MCP server: {e or type(e).__name__}"
