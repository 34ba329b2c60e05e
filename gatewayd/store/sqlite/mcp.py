"""SQLite: the MCP gateway's servers, sealed secrets, grants and call rows."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime

from gatewayd.store.mcp_records import McpCallRow, McpGrantRecord, McpServerRecord
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text
from gatewayd.store.tenant_sql import GRANTS_BY_PATH

_SERVER_COLUMNS = (
    "name, url, transport, description, enabled, headers, secret_refs, timeout_s,"
    " rate_per_minute, created_at, updated_at"
)
_CALL_COLUMNS = "at, key_id, project, server, tool, status, latency_ms, bytes_in, bytes_out"

# A replacement keeps the name's first created_at.
_UPSERT_SERVER = f"""
INSERT INTO mcp_servers ({_SERVER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET
    url = excluded.url,
    transport = excluded.transport,
    description = excluded.description,
    enabled = excluded.enabled,
    headers = excluded.headers,
    secret_refs = excluded.secret_refs,
    timeout_s = excluded.timeout_s,
    rate_per_minute = excluded.rate_per_minute,
    updated_at = excluded.updated_at
"""

# Every sealed secret no server's secret_refs names any more.
_DELETE_UNREFERENCED = """
DELETE FROM mcp_secrets WHERE ref NOT IN (
    SELECT refs.value FROM mcp_servers, json_each(mcp_servers.secret_refs) AS refs
)
"""


class SqliteMcp:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def put_mcp_server(self, rec: McpServerRecord, new_secrets: dict[str, bytes]) -> None:
        now = _to_text(datetime.now(UTC))
        async with self._lock:
            with self._mapped(f"save MCP server {rec.name}"):
                async with self._transaction() as db:
                    await db.execute(_UPSERT_SERVER, _server_params(rec))
                    await db.executemany(
                        "INSERT INTO mcp_secrets (ref, sealed, created_at) VALUES (?, ?, ?)"
                        " ON CONFLICT (ref) DO UPDATE SET sealed = excluded.sealed",
                        [(ref, sealed, now) for ref, sealed in new_secrets.items()],
                    )
                    await db.execute(_DELETE_UNREFERENCED)

    async def get_mcp_server(self, name: str) -> McpServerRecord | None:
        async with self._lock:
            with self._mapped(f"read MCP server {name}"):
                async with self._conn.execute(
                    f"SELECT {_SERVER_COLUMNS} FROM mcp_servers WHERE name = ?", (name,)
                ) as cur:
                    row = await cur.fetchone()
        return None if row is None else _server(row)

    async def list_mcp_servers(self) -> list[McpServerRecord]:
        async with self._lock:
            with self._mapped("list MCP servers"):
                async with self._conn.execute(
                    f"SELECT {_SERVER_COLUMNS} FROM mcp_servers ORDER BY name"
                ) as cur:
                    rows = await cur.fetchall()
        return [_server(r) for r in rows]

    async def delete_mcp_server(self, name: str) -> int | None:
        async with self._lock:
            with self._mapped(f"remove MCP server {name}"):
                async with self._transaction() as db:
                    cur = await db.execute("DELETE FROM mcp_servers WHERE name = ?", (name,))
                    if cur.rowcount != 1:
                        return None
                    # Not LIKE: '_' in a server name is a LIKE wildcard.
                    cur = await db.execute(
                        "DELETE FROM mcp_grants WHERE target = ?"
                        " OR substr(target, 1, length(?) + 1) = ? || '.'",
                        (name, name, name),
                    )
                    removed = cur.rowcount
                    await db.execute(_DELETE_UNREFERENCED)
                    return removed

    async def get_sealed_secrets(self, refs: Sequence[str]) -> dict[str, bytes]:
        wanted = list(dict.fromkeys(refs))
        if not wanted:
            return {}
        marks = ", ".join("?" * len(wanted))
        async with self._lock:
            with self._mapped("read sealed MCP credentials"):
                async with self._conn.execute(
                    f"SELECT ref, sealed FROM mcp_secrets WHERE ref IN ({marks})", wanted
                ) as cur:
                    rows = await cur.fetchall()
        return {r["ref"]: bytes(r["sealed"]) for r in rows}

    async def list_sealed_secret_refs(self) -> list[str]:
        async with self._lock:
            with self._mapped("list sealed MCP credentials"):
                async with self._conn.execute("SELECT ref FROM mcp_secrets ORDER BY ref") as cur:
                    rows = await cur.fetchall()
        return [r["ref"] for r in rows]

    async def add_mcp_grant(self, scope: str, target: str, at: datetime) -> bool:
        async with self._lock:
            with self._mapped(f"grant {target} to {scope}"):
                stored = await self._grant_scope(scope)
                if stored is None:
                    return False
                cur = await self._conn.execute(
                    "INSERT INTO mcp_grants (scope, target, created_at) VALUES (?, ?, ?)"
                    " ON CONFLICT (scope, target) DO NOTHING",
                    (stored, target, _to_text(at)),
                )
                return cur.rowcount == 1

    async def remove_mcp_grant(self, scope: str, target: str) -> bool:
        async with self._lock:
            with self._mapped(f"revoke {target} from {scope}"):
                stored = await self._grant_scope(scope) or scope
                cur = await self._conn.execute(
                    "DELETE FROM mcp_grants WHERE scope = ? AND target = ?", (stored, target)
                )
                return cur.rowcount == 1

    async def list_mcp_grants(self) -> list[McpGrantRecord]:
        async with self._lock:
            with self._mapped("list MCP grants"):
                async with self._conn.execute(GRANTS_BY_PATH) as cur:
                    rows = await cur.fetchall()
        grants = [
            McpGrantRecord(r["scope"], r["target"], _from_text(r["created_at"])) for r in rows
        ]
        return sorted(grants, key=lambda g: (g.scope, g.target))

    async def record_mcp_calls(self, rows: Sequence[McpCallRow]) -> None:
        if not rows:
            return
        params = [
            (
                _to_text(r.at),
                r.key_id,
                r.project,
                r.server,
                r.tool,
                r.status,
                r.latency_ms,
                r.bytes_in,
                r.bytes_out,
                r.row_id or None,
            )
            for r in rows
        ]
        async with self._lock:
            with self._mapped(f"write {len(rows)} MCP call rows"):
                async with self._transaction() as db:
                    # A row id already stored (a journal replayed after a crash) is skipped.
                    await db.executemany(
                        f"INSERT INTO mcp_calls ({_CALL_COLUMNS}, row_id)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (row_id) DO NOTHING",
                        params,
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
        if since is not None:
            where.append("at >= ?")
            args.append(_to_text(since))
        if until is not None:
            where.append("at < ?")
            args.append(_to_text(until))
        for column, value in (("server", server), ("key_id", key_id)):
            if value:
                where.append(f"{column} = ?")
                args.append(value)
        if project:
            # The path and all beneath it, as usage_groups takes it (an org or team works).
            where.append("(project = ? OR substr(project, 1, length(?) + 1) = ? || '/')")
            args += [project, project, project]
        sql = f"SELECT {_CALL_COLUMNS} FROM mcp_calls"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY at, id LIMIT ?"
        args.append(limit)
        async with self._lock:
            with self._mapped("read MCP call rows"):
                async with self._conn.execute(sql, args) as cur:
                    rows = await cur.fetchall()
        return [
            McpCallRow(
                at=_from_text(r["at"]),
                key_id=r["key_id"],
                project=r["project"],
                server=r["server"],
                tool=r["tool"],
                status=r["status"],
                latency_ms=r["latency_ms"],
                bytes_in=r["bytes_in"],
                bytes_out=r["bytes_out"],
            )
            for r in rows
        ]


def _server_params(rec: McpServerRecord) -> tuple:
    return (
        rec.name,
        rec.url,
        rec.transport,
        rec.description,
        int(rec.enabled),
        _json(rec.headers),
        _json(rec.secret_refs),
        rec.timeout_s,
        rec.rate_per_minute,
        _to_text(rec.created_at),
        _to_text(rec.updated_at),
    )


def _server(row: sqlite3.Row) -> McpServerRecord:
    return McpServerRecord(
        name=row["name"],
        url=row["url"],
        transport=row["transport"],
        description=row["description"],
        enabled=bool(row["enabled"]),
        headers=json.loads(row["headers"]),
        secret_refs=json.loads(row["secret_refs"]),
        timeout_s=row["timeout_s"],
        rate_per_minute=row["rate_per_minute"],
        created_at=_from_text(row["created_at"]),
        updated_at=_from_text(row["updated_at"]),
    )
