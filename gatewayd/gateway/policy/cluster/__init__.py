"""Budgets and rate limits that hold across control planes sharing one store.

Each control plane keeps checking and charging in memory, as one does alone;
``CounterSync`` writes its running totals to the store every second and
counts the others' against the same scopes (docs/decisions.md has the bound
on what slips through in between). ``mount_shared_limits`` puts it into a
starting gatewayd.
"""

from __future__ import annotations

import asyncio
import secrets
import socket

from gatewayd.gateway.policy.cluster.budgets import SharedBudgetTable
from gatewayd.gateway.policy.cluster.rates import SharedLimitTable
from gatewayd.gateway.policy.cluster.sync import CounterSync

__all__ = ["CounterSync", "SharedBudgetTable", "SharedLimitTable", "mount_shared_limits"]


async def mount_shared_limits(server) -> None:
    """Give ``server.gateway`` budgets and limits shared through ``server.store``, and start
    their sync in ``server._tasks``; ``server.shared_limits`` is the ``CounterSync``.

    Called before the gateway serves: the budgets keep what was loaded from
    usage at start, and the limit buckets are all still full.
    """
    gateway = server.gateway
    # A run of its own: a restarted control plane counts afresh, and its earlier
    # run's totals are read like another's (they are in the usage rows already).
    cp_id = getattr(server, "control_plane_id", "") or socket.gethostname()
    writer = f"{cp_id}/{secrets.token_hex(4)}"
    budgets = SharedBudgetTable()
    budgets.load(gateway.budgets.snapshot())
    gateway.budgets = budgets
    # The gateway reads its limiter from here on every request; it holds no state yet.
    limits = gateway._limits = SharedLimitTable()
    # MCP servers' --rate is counted there too: it holds across control planes as well.
    if getattr(server, "mcp", None) is not None:
        server.mcp.rates.share(limits)
    # On-demand models' requests travel the same way: the leader learns of them.
    demand = getattr(gateway, "demand", None)
    sync = server.shared_limits = CounterSync(server.store, writer, budgets, limits, demand=demand)
    await sync.start()
    server._tasks.append(asyncio.create_task(sync.run(), name="shared-limits"))
