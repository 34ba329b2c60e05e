"""The MCP gateway: /mcp on the gateway port, the company MCP servers behind it.

``mount`` wires it into a starting gatewayd: the registry of servers and
grants read from the store, the sealer of their credentials, the upstream
connections, rate buckets, breakers, accounting and the built-in
``llmgw:admin`` tools as ``server.mcp`` (an McpRuntime: the admin RPCs use it),
the ``/mcp`` endpoint (gatewayd/http/app.py routes to it),
and their background tasks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from llmgw.errors import StoreError

if TYPE_CHECKING:
    from gatewayd.mcp.accounting import McpCallWriter
    from gatewayd.mcp.runtime import McpRuntime

log = logging.getLogger(__name__)


async def mount(server) -> McpRuntime | None:
    """Build ``server.mcp`` from ``server.cfg.mcp``, read the servers and grants once, and
    start its tasks (they are ``server._tasks``: stopped with the server). With
    ``mcp.enabled: false`` there is none: ``server.mcp`` is None."""
    # Imported here: importing one part (gatewayd.mcp.protect) must not import them all.
    from gatewayd.gateway.metering.journal import UsageJournal
    from gatewayd.mcp.accounting import McpCallWriter, McpMetrics, decode_call, encode_call
    from gatewayd.mcp.builtin_admin import AdminTools
    from gatewayd.mcp.endpoint.asgi import McpEndpoint
    from gatewayd.mcp.protect import Breakers, RateBuckets
    from gatewayd.mcp.rebind import bind_origins
    from gatewayd.mcp.registry import McpRegistry
    from gatewayd.mcp.runtime import McpRuntime
    from gatewayd.mcp.seal import Sealer
    from gatewayd.mcp.upstream import UpstreamPool
    from llmgw.mcp.names import ADMIN_SERVER

    cfg = server.cfg.mcp
    if not cfg.enabled:
        server.mcp = None
        return None
    sealer = Sealer.for_paths(server.paths)
    # Call rows go to a journal on local disk before each answer goes out, as usage
    # rows do; what an earlier run left there (a kill -9, a store that was down) is
    # written first.
    journal = UsageJournal(
        server.paths.server_data_dir / "mcp-journal", encode=encode_call, decode=decode_call
    )
    await journal.open()
    writer = McpCallWriter(server.store, journal=journal)
    await _replay(writer)
    # Credentials sealed before origins were bound are sealed for theirs before any is opened.
    await bind_origins(server.store, sealer)
    registry = McpRegistry(server.store, sealer, cfg)
    await registry.refresh()
    admin_tools = AdminTools()
    admin_names = frozenset(t["name"] for t in admin_tools.tools())

    def known(name: str, tool: str) -> bool:
        # Metric labels come from the registry only: a name a caller made up is "unknown".
        # An empty tool asks after the server alone (a known server, a made-up tool).
        if name == ADMIN_SERVER:
            return not tool or tool in admin_names
        if registry.get(name) is None:
            return False
        return not tool or tool in registry.tools_seen.get(name, ())

    rt = server.mcp = McpRuntime(
        cfg=cfg,
        registry=registry,
        sealer=sealer,
        pool=UpstreamPool(
            get_server=registry.get,
            headers_for=registry.headers_for,
            timeout_for=registry.timeout_s,
            idle_s=cfg.upstream_idle_s,
        ),
        rates=RateBuckets(),
        breakers=Breakers(cfg.breaker_failures, cfg.breaker_open_s),
        writer=writer,
        metrics=McpMetrics(server.metrics.registry, known),
        admin_tools=admin_tools,
    )
    rt.endpoint = McpEndpoint(rt, server.keys)
    registry.on_change(rt.endpoint.tools_changed)
    registry.on_change(_forget_changed_servers(rt, server._tasks))
    server._tasks.extend(rt.start())
    return rt


async def _replay(writer: McpCallWriter) -> None:
    """Write what earlier runs left in the journal before /mcp serves."""
    if writer.journal is None or writer.journal.backlog_segments <= 1:  # this run's own only
        return
    try:
        rows = await writer.flush()
    except StoreError as e:
        log.warning("the MCP call journal's rows wait for the store: %s", e)
        return
    log.info("MCP call journal: %d rows of an earlier run replayed into the store", rows)


def _forget_changed_servers(rt: McpRuntime, tasks: list):
    """A listener closing the connections to servers whose address, headers or credentials
    changed in the store, and forgetting their breakers, so the next call uses what is kept
    now. The admin call that made a change does this itself on its own control plane; this
    is how every other control plane sharing the store learns of it (within a refresh)."""
    import asyncio

    seen = {rec.name: rec for rec in rt.registry.servers()}

    def changed() -> None:
        now = {rec.name: rec for rec in rt.registry.servers()}
        gone = [
            name
            for name, old in seen.items()
            if (new := now.get(name)) is None
            or (new.url, new.transport, new.headers, new.secret_refs, new.enabled)
            != (old.url, old.transport, old.headers, old.secret_refs, old.enabled)
        ]
        seen.clear()
        seen.update(now)
        for name in gone:
            rt.breakers.forget(name)
            task = asyncio.get_running_loop().create_task(
                rt.pool.drop_server(name), name=f"mcp-drop-{name}"
            )
            tasks.append(task)
            task.add_done_callback(lambda t: t in tasks and tasks.remove(t))

    return changed
