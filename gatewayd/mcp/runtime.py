"""McpRuntime: the MCP gateway's parts in one started gatewayd, as the endpoint and admin use them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmgw.mcp.config import McpConfig

if TYPE_CHECKING:
    from gatewayd.mcp.accounting import McpCallWriter, McpMetrics
    from gatewayd.mcp.builtin_admin import AdminTools
    from gatewayd.mcp.endpoint.asgi import McpEndpoint
    from gatewayd.mcp.protect import Breakers, RateBuckets
    from gatewayd.mcp.registry import McpRegistry
    from gatewayd.mcp.seal import Sealer
    from gatewayd.mcp.upstream import UpstreamPool

log = logging.getLogger(__name__)


@dataclass
class McpRuntime:
    """The registry of servers and grants, the sealer of their credentials, the
    upstream connections, rate buckets and breakers, accounting, the built-in
    ``llmgw:admin`` tools and the ``/mcp`` endpoint itself."""

    cfg: McpConfig
    registry: McpRegistry
    sealer: Sealer
    pool: UpstreamPool
    rates: RateBuckets
    breakers: Breakers
    writer: McpCallWriter
    metrics: McpMetrics
    admin_tools: AdminTools
    endpoint: McpEndpoint | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)

    def start(self) -> list[asyncio.Task]:
        """Start the background work: registry refresh, idle upstreams, call rows, idle sessions."""
        work = {
            "mcp-registry": self.registry.run(),
            "mcp-upstreams": self.pool.run(),
            "mcp-calls": self.writer.run(),
        }
        if self.endpoint is not None:
            work["mcp-sessions"] = self.endpoint.run()
        self.tasks = [asyncio.create_task(coro, name=name) for name, coro in work.items()]
        return self.tasks

    def end_streams(self) -> None:
        """End every open /mcp notification stream (the server is stopping)."""
        if self.endpoint is not None:
            self.endpoint.close()

    async def close(self) -> None:
        """Stop the background work, end streams, close upstreams, write the last call rows."""
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.end_streams()
        with contextlib.suppress(Exception):
            await self.pool.close()
        await self.writer.close()
