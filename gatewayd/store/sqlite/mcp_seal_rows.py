"""SQLite: credentials sealed before origins were bound (gatewayd.store.mcp_seal_rows)."""

from __future__ import annotations


class SqliteUnboundSeals:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def list_unbound_sealed_secrets(self) -> dict[str, bytes]:
        async with self._lock:
            with self._mapped("list MCP credentials sealed without their origin"):
                async with self._conn.execute(
                    "SELECT ref, sealed FROM mcp_secrets WHERE origin_bound = 0"
                ) as cur:
                    rows = await cur.fetchall()
        return {r["ref"]: bytes(r["sealed"]) for r in rows}

    async def bind_sealed_secret(self, ref: str, sealed: bytes) -> bool:
        async with self._lock:
            with self._mapped(f"seal MCP credential {ref} again for its origin"):
                cur = await self._conn.execute(
                    "UPDATE mcp_secrets SET sealed = ?, origin_bound = 1"
                    " WHERE ref = ? AND origin_bound = 0",
                    (sealed, ref),
                )
                return cur.rowcount == 1
