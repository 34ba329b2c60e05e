"""PostgreSQL: credentials sealed before origins were bound (gatewayd.store.mcp_seal_rows)."""

from __future__ import annotations


class PostgresUnboundSeals:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def list_unbound_sealed_secrets(self) -> dict[str, bytes]:
        with self._mapped("list MCP credentials sealed without their origin"):
            rows = await self._conn.fetch(
                "SELECT ref, sealed FROM mcp_secrets WHERE NOT origin_bound"
            )
        return {r["ref"]: bytes(r["sealed"]) for r in rows}

    async def bind_sealed_secret(self, ref: str, sealed: bytes) -> bool:
        with self._mapped(f"seal MCP credential {ref} again for its origin"):
            found = await self._conn.fetchval(
                "UPDATE mcp_secrets SET sealed = $1, origin_bound = true"
                " WHERE ref = $2 AND NOT origin_bound RETURNING true",
                sealed,
                ref,
            )
        return bool(found)
