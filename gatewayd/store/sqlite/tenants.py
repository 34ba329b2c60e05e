"""SQLite: organizations, teams and projects (the SQL is gatewayd.store.tenant_sql's)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gatewayd.store import tenant_sql as sql
from gatewayd.store.records import TenantRecord
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text
from gatewayd.store.tenant_records import TenantHoldings, TenantRemoval

_INSERT = f"INSERT INTO tenants ({sql.TENANT_COLUMNS}) VALUES (?, ?, ?, ?, ?) ON CONFLICT (path) DO"


class _Tx:
    def __init__(self, db) -> None:
        self._db = db

    async def rows(self, text: str, args: Sequence[Any]) -> list[Mapping[str, Any]]:
        async with self._db.execute(text, args) as cur:
            return list(await cur.fetchall())

    async def run(self, text: str, args: Sequence[Any]) -> None:
        await self._db.execute(text, args)


def _params(rec: TenantRecord) -> tuple:
    return (rec.id, rec.path, rec.kind, _json(rec.limits), _to_text(rec.created_at))


class SqliteTenants:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def create_tenant(self, rec: TenantRecord) -> bool:
        async with self._lock:
            with self._mapped(f"add {rec.kind} {rec.path}"):
                cur = await self._conn.execute(_INSERT + " NOTHING", _params(rec))
                return cur.rowcount == 1

    async def put_tenant(self, rec: TenantRecord) -> None:
        async with self._lock:
            with self._mapped(f"save {rec.kind} {rec.path}"):
                await self._conn.execute(
                    _INSERT + " UPDATE SET limits = excluded.limits", _params(rec)
                )

    async def list_tenants(self) -> list[TenantRecord]:
        async with self._lock:
            with self._mapped("list organizations, teams and projects"):
                async with self._conn.execute(sql.SELECT_TENANTS + " ORDER BY path") as cur:
                    rows = await cur.fetchall()
        return [
            TenantRecord(
                id=r["id"],
                path=r["path"],
                kind=r["kind"],
                limits=json.loads(r["limits"]),
                created_at=_from_text(r["created_at"]),
            )
            for r in rows
        ]

    async def rename_tenant(self, path: str, new_path: str) -> int:
        async with self._lock:
            with self._mapped(f"rename {path} to {new_path}"):
                async with self._transaction() as db:
                    cur = await db.execute(sql.RENAME, sql.rename_args(path, new_path))
                    return cur.rowcount

    async def tenant_holdings(self, path: str, now: datetime) -> TenantHoldings:
        async with self._lock:
            with self._mapped(f"read what {path} holds"):
                return await sql.holdings(_Tx(self._conn), path, _to_text(now))

    async def remove_tenant(self, path: str, *, force: bool, now: datetime) -> TenantRemoval | None:
        async with self._lock:
            with self._mapped(f"remove {path}"):
                async with self._transaction() as db:
                    return await sql.remove(_Tx(db), path, force=force, now=_to_text(now))

    async def tenant_path(self, tenant_id: str) -> str:
        async with self._lock:
            with self._mapped(f"read the path of {tenant_id}"):
                async with self._conn.execute(sql.PATH_OF_ID, (tenant_id,)) as cur:
                    row = await cur.fetchone()
        return row["path"] if row is not None else ""

    async def _grant_scope(self, scope: str) -> str | None:
        """How a grant's scope is kept (a level's by its id); None: no such level.
        The caller holds the lock."""
        level = sql.level_of(scope)
        if level is None:
            return scope
        async with self._conn.execute(sql.STORED_SCOPE, level) as cur:
            row = await cur.fetchone()
        return row["scope"] if row is not None else None
