"""PostgreSQL: organizations, teams and projects."""

from __future__ import annotations

from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.records import TenantRecord


def _under(path: str) -> str:
    """A LIKE pattern for everything beneath ``path`` (its own wildcards escaped)."""
    escaped = path.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "/%"


class PostgresTenants:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def create_tenant(self, rec: TenantRecord) -> bool:
        with self._mapped(f"add {rec.kind} {rec.path}"):
            status = await self._conn.execute(
                "INSERT INTO tenants (path, kind, limits, created_at) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (path) DO NOTHING",
                rec.path,
                rec.kind,
                rec.limits,
                _aware(rec.created_at),
            )
        return status.endswith(" 1")

    async def put_tenant(self, rec: TenantRecord) -> None:
        with self._mapped(f"save {rec.kind} {rec.path}"):
            await self._conn.execute(
                "INSERT INTO tenants (path, kind, limits, created_at) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (path) DO UPDATE SET limits = EXCLUDED.limits",
                rec.path,
                rec.kind,
                rec.limits,
                _aware(rec.created_at),
            )

    async def list_tenants(self) -> list[TenantRecord]:
        with self._mapped("list organizations, teams and projects"):
            rows = await self._conn.fetch(
                'SELECT path, kind, limits, created_at FROM tenants ORDER BY path COLLATE "C"'
            )
        return [TenantRecord(**dict(r)) for r in rows]

    async def rename_tenant(self, path: str, new_path: str) -> int:
        cut = len(path) + 1
        with self._mapped(f"rename {path} to {new_path}"):
            async with self._conn.acquire() as conn, conn.transaction():
                status = await conn.execute(
                    "UPDATE tenants SET path = $1 || substr(path, $2)"
                    " WHERE path = $3 OR path LIKE $4",
                    new_path,
                    cut,
                    path,
                    _under(path),
                )
                await conn.execute(
                    "UPDATE api_keys SET project = $1 || substr(project, $2)"
                    " WHERE project = $3 OR project LIKE $4",
                    new_path,
                    cut,
                    path,
                    _under(path),
                )
        return int(status.rsplit(" ", 1)[-1])

    async def delete_tenant(self, path: str) -> bool:
        with self._mapped(f"remove {path}"):
            status = await self._conn.execute("DELETE FROM tenants WHERE path = $1", path)
        return status.endswith(" 1")
