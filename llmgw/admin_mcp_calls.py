"""The admin client's calls for the MCP gateway (``llmgw ctl mcp``, the console's MCP screen).

Mixed into ``AdminClient``: each method calls one admin RPC and returns its reply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from proto.llmgw.v1 import (
    ListMcpGrantsReply,
    ListMcpGrantsRequest,
    ListMcpServersReply,
    ListMcpServersRequest,
    McpGrantReply,
    McpGrantRequest,
    McpServerRequest,
    McpServerView,
    McpTestReply,
    McpUsageReply,
    McpUsageRequest,
    PutMcpServerRequest,
    RemoveMcpServerReply,
)


class McpCalls:
    """Mixed into AdminClient, which gives the stub, the timeout and the error mapping."""

    _stub: Any
    _timeout_s: float
    _call: Callable[[Awaitable[Any]], Awaitable[Any]]

    async def list_mcp_servers(self) -> ListMcpServersReply:
        """Every company MCP server (and llmgw:admin) with its state, breaker and grants."""
        return await self._call(
            self._stub.list_mcp_servers(ListMcpServersRequest(), timeout=self._timeout_s)
        )

    async def get_mcp_server(self, name: str) -> McpServerView:
        request = McpServerRequest(name=name)
        return await self._call(self._stub.get_mcp_server(request, timeout=self._timeout_s))

    async def put_mcp_server(self, request: PutMcpServerRequest) -> McpServerView:
        """Add (``request.create``) or change a server; only the fields in ``request.set``
        change on a change."""
        return await self._call(self._stub.put_mcp_server(request, timeout=self._timeout_s))

    async def remove_mcp_server(self, name: str) -> RemoveMcpServerReply:
        request = McpServerRequest(name=name)
        return await self._call(self._stub.remove_mcp_server(request, timeout=self._timeout_s))

    async def test_mcp_server(self, name: str) -> McpTestReply:
        """Connect to the server as the gateway would, list its tools, say what failed."""
        request = McpServerRequest(name=name)
        return await self._call(self._stub.test_mcp_server(request, timeout=self._timeout_s))

    async def grant_mcp(self, who: str, what: str) -> McpGrantReply:
        request = McpGrantRequest(who=who, what=what)
        return await self._call(self._stub.grant_mcp(request, timeout=self._timeout_s))

    async def revoke_mcp(self, who: str, what: str) -> McpGrantReply:
        request = McpGrantRequest(who=who, what=what)
        return await self._call(self._stub.revoke_mcp(request, timeout=self._timeout_s))

    async def list_mcp_grants(self, who: str = "", server: str = "") -> ListMcpGrantsReply:
        request = ListMcpGrantsRequest(who=who, server=server)
        return await self._call(self._stub.list_mcp_grants(request, timeout=self._timeout_s))

    async def mcp_usage(self, request: McpUsageRequest) -> McpUsageReply:
        return await self._call(self._stub.mcp_usage(request, timeout=self._timeout_s))
