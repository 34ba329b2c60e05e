"""How the gateway talks to company MCP servers: one Upstream per (downstream owner, server).

Upstream        one connection: streamable HTTP (2026-07-28, else the 2025-11-25 session
                handshake) or HTTP+SSE; request(), list_tools(), notifications to a callback
UpstreamPool    the Upstreams by owner: opened once, reused for every call, closed when idle
UpstreamError   no answer (.kind: connect, http, timeout, protocol, closed)
UpstreamRpcError  the server's own JSON-RPC error, to relay as is
"""

from gatewayd.mcp.upstream.client import Upstream
from gatewayd.mcp.upstream.errors import UpstreamError, UpstreamRpcError
from gatewayd.mcp.upstream.pool import UpstreamPool

__all__ = ["Upstream", "UpstreamError", "UpstreamPool", "UpstreamRpcError"]
