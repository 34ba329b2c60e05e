"""PostgreSQL: organizations, teams and projects (the SQL is gatewayd.store.tenant_sql's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gatewayd.store import tenant_sql as sql
from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.records import TenantRecord
from gatewayd.store.tenant_records import TenantHoldings, TenantRemoval

_INSERT = sql.numbered(
    f"INSERT INTO tenants ({sql.TENANT_COLUMNS}) VALUES (?, ?, ?, ?, ?) ON CONFLICT (path) DO"
)


class _Tx:
    def __init__(self, conn) -> None:
        self._conn = conn

    async def rows(self, text: str, args: Sequence[Any]) -> list[Mapping[str, Any]]:
        return await self._conn.fetch(sql.numbered(text), *args)

    async def run(self, text: str, args: Sequence[Any]) -> None:
        await self._conn.execute(sql.numbered(text), *args)


def _params(rec: TenantRecord) -> tuple:
    return (rec.id, rec.path, rec.kind, rec.limits, _aware(rec.created_at))


class PostgresTenants:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def create_tenant(self, rec: TenantRecord) -> bool:
        with self._mapped(f"add {rec.kind} {rec.path}"):
            status = await self._conn.execute(_INSERT + " NOTHING", *_params(rec))
        return status.endswith(" 1")

    async def put_tenant(self, rec: TenantRecord) -> None:
        with self._mapped(f"save {rec.kind} {rec.path}"):
            await self._conn.execute(
                _INSERT + " UPDATE SET limits = EXCLUDED.limits", *_params(rec)
            )

    async def list_tenants(self) -> list[TenantRecord]:
        with self._mapped("list organizations, teams and projects"):
            rows = await self._conn.fetch(sql.SELECT_TENANTS + ' ORDER BY path COLLATE "C"')
        return [TenantRecord(**dict(r)) for r in rows]

    async def rename_tenant(self, path: str, new_path: str) -> int:
        with self._mapped(f"rename {path} to {new_path}"):
            async with self._conn.acquire() as conn, conn.transaction():
                status = await conn.execute(
                    sql.numbered(sql.RENAME), *sql.rename_args(path, new_path)
                )
        return int(status.rsplit(" ", 1)[-1])

    async def tenant_holdings(self, path: str, now: datetime) -> TenantHoldings:
        with self._mapped(f"read what {path} holds"):
            async with self._conn.acquire() as conn, conn.transaction(readonly=True):
                return await sql.holdings(_Tx(conn), path, _aware(now))

    async def remove_tenant(self, path: str, *, force: bool, now: datetime) -> TenantRemoval | None:
        with self._mapped(f"remove {path}"):
            async with self._conn.acquire() as conn, conn.transaction():
                return await sql.remove(_Tx(conn), path, force=force, now=_aware(now))

    async def tenant_path(self, tenant_id: str) -> str:
        with self._mapped(f"read the path of {tenant_id}"):
            path = await self._conn.fetchval(sql.numbered(sql.PATH_OF_ID), tenant_id)
        return path or ""

    async def _grant_scope(self, scope: str) -> str | None:
        """How a grant's scope is kept (a level's by its id); None: no such level."""
        level = sql.level_of(scope)
        if level is None:
            return scope
        return await self._conn.fetchval(sql.numbered(sql.STORED_SCOPE), *level)
