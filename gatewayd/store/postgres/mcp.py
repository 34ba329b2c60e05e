"""PostgreSQL: the MCP gateway's servers, sealed secrets, grants and call rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from gatewayd.store.mcp_records import McpCallRow, McpGrantRecord, McpServerRecord
from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.tenant_sql import GRANTS_BY_PATH

_SERVER_COLUMNS = (
    "name, url, transport, description, enabled, headers, secret_refs, timeout_s,"
    " rate_per_minute, created_at, updated_at"
)
_CALL_COLUMNS = "at, key_id, project, server, tool, status, latency_ms, bytes_in, bytes_out"

# A replacement keeps the name's first created_at.
_UPSERT_SERVER = f"""
INSERT INTO mcp_servers ({_SERVER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO UPDATE SET
    url = EXCLUDED.url,
    transport = EXCLUDED.transport,
    description = EXCLUDED.description,
    enabled = EXCLUDED.enabled,
    headers = EXCLUDED.headers,
    secret_refs = EXCLUDED.secret_refs,
    timeout_s = EXCLUDED.timeout_s,
    rate_per_minute = EXCLUDED.rate_per_minute,
    updated_at = EXCLUDED.updated_at
"""

# Every sealed secret no server's secret_refs names any more.
_DELETE_UNREFERENCED = """
DELETE FROM mcp_secrets WHERE ref NOT IN (
    SELECT refs.value FROM mcp_servers, jsonb_each_text(mcp_servers.secret_refs) AS refs
)
"""


class PostgresMcp:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def put_mcp_server(self, rec: McpServerRecord, new_secrets: dict[str, bytes]) -> None:
        now = datetime.now(UTC)
        with self._mapped(f"save MCP server {rec.name}"):
            async with self._conn.acquire() as conn, conn.transaction():
                await conn.execute(_UPSERT_SERVER, *_server_params(rec))
                if new_secrets:
                    await conn.executemany(
                        "INSERT INTO mcp_secrets (ref, sealed, created_at) VALUES ($1, $2, $3)"
                        " ON CONFLICT (ref) DO UPDATE SET sealed = EXCLUDED.sealed",
                        [(ref, sealed, now) for ref, sealed in new_secrets.items()],
                    )
                await conn.execute(_DELETE_UNREFERENCED)

    async def get_mcp_server(self, name: str) -> McpServerRecord | None:
        with self._mapped(f"read MCP server {name}"):
            row = await self._conn.fetchrow(
                f"SELECT {_SERVER_COLUMNS} FROM mcp_servers WHERE name = $1", name
            )
        return None if row is None else McpServerRecord(**dict(row))

    async def list_mcp_servers(self) -> list[McpServerRecord]:
        with self._mapped("list MCP servers"):
            # COLLATE "C": byte order, as SQLite sorts, whatever the database's locale.
            rows = await self._conn.fetch(
                f'SELECT {_SERVER_COLUMNS} FROM mcp_servers ORDER BY name COLLATE "C"'
            )
        return [McpServerRecord(**dict(r)) for r in rows]

    async def delete_mcp_server(self, name: str) -> int | None:
        with self._mapped(f"remove MCP server {name}"):
            async with self._conn.acquire() as conn, conn.transaction():
                found = await conn.fetchval(
                    "DELETE FROM mcp_servers WHERE name = $1 RETURNING true", name
                )
                if not found:
                    return None
                # Not LIKE: '_' in a server name is a LIKE wildcard.
                status = await conn.execute(
                    "DELETE FROM mcp_grants WHERE target = $1"
                    " OR left(target, length($1) + 1) = $1 || '.'",
                    name,
                )
                await conn.execute(_DELETE_UNREFERENCED)
        return int(status.rsplit(" ", 1)[-1])

    async def get_sealed_secrets(self, refs: Sequence[str]) -> dict[str, bytes]:
        wanted = list(dict.fromkeys(refs))
        if not wanted:
            return {}
        with self._mapped("read sealed MCP credentials"):
            rows = await self._conn.fetch(
                "SELECT ref, sealed FROM mcp_secrets WHERE ref = ANY($1::text[])", wanted
            )
        return {r["ref"]: bytes(r["sealed"]) for r in rows}

    async def list_sealed_secret_refs(self) -> list[str]:
        with self._mapped("list sealed MCP credentials"):
            rows = await self._conn.fetch('SELECT ref FROM mcp_secrets ORDER BY ref COLLATE "C"')
        return [r["ref"] for r in rows]

    async def add_mcp_grant(self, scope: str, target: str, at: datetime) -> bool:
        with self._mapped(f"grant {target} to {scope}"):
            stored = await self._grant_scope(scope)
            if stored is None:
                return False
            added = await self._conn.fetchval(
                "INSERT INTO mcp_grants (scope, target, created_at) VALUES ($1, $2, $3)"
                " ON CONFLICT (scope, target) DO NOTHING RETURNING true",
                stored,
                target,
                _aware(at),
            )
        return bool(added)

    async def remove_mcp_grant(self, scope: str, target: str) -> bool:
        with self._mapped(f"revoke {target} from {scope}"):
            stored = await self._grant_scope(scope) or scope
            found = await self._conn.fetchval(
                "DELETE FROM mcp_grants WHERE scope = $1 AND target = $2 RETURNING true",
                stored,
                target,
            )
        return bool(found)

    async def list_mcp_grants(self) -> list[McpGrantRecord]:
        with self._mapped("list MCP grants"):
            rows = await self._conn.fetch(GRANTS_BY_PATH)
        grants = [McpGrantRecord(**dict(r)) for r in rows]
        return sorted(grants, key=lambda g: (g.scope, g.target))

    async def record_mcp_calls(self, rows: Sequence[McpCallRow]) -> None:
        if not rows:
            return
        columns = [
            [_aware(r.at) for r in rows],
            [r.key_id for r in rows],
            [r.project for r in rows],
            [r.server for r in rows],
            [r.tool for r in rows],
            [r.status for r in rows],
            [float(r.latency_ms) for r in rows],
            [r.bytes_in for r in rows],
            [r.bytes_out for r in rows],
            [r.row_id or None for r in rows],
        ]
        with self._mapped(f"write {len(rows)} MCP call rows"):
            # One statement for the batch: atomic on its own, one round trip. A row id
            # already stored (a journal replayed after a crash) is skipped.
            await self._conn.execute(
                f"INSERT INTO mcp_calls ({_CALL_COLUMNS}, row_id)"
                " SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[],"
                " $5::text[], $6::text[], $7::float8[], $8::bigint[], $9::bigint[], $10::text[])"
                " ON CONFLICT (row_id) DO NOTHING",
                *columns,
            )

    async def list_mcp_calls(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        server: str = "",
        key_id: str = "",
        project: str = "",
        limit: int = 100_000,
    ) -> list[McpCallRow]:
        where: list[str] = []
        args: list = []

        def arg(value) -> str:
            args.append(value)
            return f"${len(args)}"

        if since is not None:
            where.append(f"at >= {arg(_aware(since))}")
        if until is not None:
            where.append(f"at < {arg(_aware(until))}")
        for column, value in (("server", server), ("key_id", key_id)):
            if value:
                where.append(f"{column} = {arg(value)}")
        if project:
            # The path and all beneath it, as usage_groups takes it (an org or team works).
            p = arg(project)
            where.append(f"(project = {p} OR left(project, length({p}) + 1) = {p} || '/')")
        sql = f"SELECT {_CALL_COLUMNS} FROM mcp_calls"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY at, id LIMIT {arg(limit)}"
        with self._mapped("read MCP call rows"):
            rows = await self._conn.fetch(sql, *args)
        return [McpCallRow(**dict(r)) for r in rows]


def _server_params(rec: McpServerRecord) -> tuple:
    return (
        rec.name,
        rec.url,
        rec.transport,
        rec.description,
        rec.enabled,
        rec.headers,
        rec.secret_refs,
        float(rec.timeout_s),
        rec.rate_per_minute,
        _aware(rec.created_at),
        _aware(rec.updated_at),
    )
