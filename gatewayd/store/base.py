"""The one async interface every store backend implements.

Datetimes go in and come out timezone-aware (UTC).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from gatewayd.store.records import HeartbeatRow, NodeRecord


class Store(Protocol):
    """The control plane's durable state. SQLite and PostgreSQL implement it."""

    backend: str  # "sqlite" or "postgres"

    async def open(self) -> None:
        """Connect and apply pending migrations, in order."""

    async def close(self) -> None: ...

    async def applied_migrations(self) -> list[str]:
        """Names of the migrations applied, in order ("0001_nodes", …)."""

    async def upsert_node(self, node: NodeRecord) -> None:
        """Insert or replace a node's registration.

        Operator overlays (``cordoned``, ``draining``) already stored are kept:
        a node re-registering does not uncordon itself.
        """

    async def get_node(self, node_id: str) -> NodeRecord | None: ...

    async def list_nodes(self) -> list[NodeRecord]:
        """All nodes, ordered by node id."""

    async def set_node_state(
        self, node_id: str, state: str, reason: str, since: datetime
    ) -> None: ...

    async def set_node_cordoned(self, node_id: str, cordoned: bool) -> bool:
        """Set the cordon overlay; False when the node does not exist."""

    async def record_heartbeats(self, rows: list[HeartbeatRow]) -> None:
        """Write a batch of latest heartbeats in one transaction."""
