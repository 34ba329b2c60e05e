"""SQLite: organizations, teams and projects."""

from __future__ import annotations

import json

from gatewayd.store.records import TenantRecord
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text


def _under(path: str) -> str:
    """A LIKE pattern for everything beneath ``path`` (its own wildcards escaped)."""
    escaped = path.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "/%"


class SqliteTenants:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def create_tenant(self, rec: TenantRecord) -> bool:
        async with self._lock:
            with self._mapped(f"add {rec.kind} {rec.path}"):
                cur = await self._conn.execute(
                    "INSERT INTO tenants (path, kind, limits, created_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (path) DO NOTHING",
                    (rec.path, rec.kind, _json(rec.limits), _to_text(rec.created_at)),
                )
                return cur.rowcount == 1

    async def put_tenant(self, rec: TenantRecord) -> None:
        async with self._lock:
            with self._mapped(f"save {rec.kind} {rec.path}"):
                await self._conn.execute(
                    "INSERT INTO tenants (path, kind, limits, created_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (path) DO UPDATE SET limits = excluded.limits",
                    (rec.path, rec.kind, _json(rec.limits), _to_text(rec.created_at)),
                )

    async def list_tenants(self) -> list[TenantRecord]:
        async with self._lock:
            with self._mapped("list organizations, teams and projects"):
                async with self._conn.execute(
                    "SELECT path, kind, limits, created_at FROM tenants ORDER BY path"
                ) as cur:
                    rows = await cur.fetchall()
        return [
            TenantRecord(
                path=r["path"],
                kind=r["kind"],
                limits=json.loads(r["limits"]),
                created_at=_from_text(r["created_at"]),
            )
            for r in rows
        ]

    async def rename_tenant(self, path: str, new_path: str) -> int:
        cut = len(path) + 1  # SQL strings count from 1
        async with self._lock:
            with self._mapped(f"rename {path} to {new_path}"):
                async with self._transaction() as db:
                    cur = await db.execute(
                        "UPDATE tenants SET path = ? || substr(path, ?)"
                        " WHERE path = ? OR path LIKE ? ESCAPE '\\'",
                        (new_path, cut, path, _under(path)),
                    )
                    n = cur.rowcount
                    await db.execute(
                        "UPDATE api_keys SET project = ? || substr(project, ?)"
                        " WHERE project = ? OR project LIKE ? ESCAPE '\\'",
                        (new_path, cut, path, _under(path)),
                    )
        return n

    async def delete_tenant(self, path: str) -> bool:
        async with self._lock:
            with self._mapped(f"remove {path}"):
                cur = await self._conn.execute("DELETE FROM tenants WHERE path = ?", (path,))
                return cur.rowcount == 1
