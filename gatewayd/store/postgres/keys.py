"""PostgreSQL: API keys (hashes only)."""

from __future__ import annotations

from datetime import datetime

from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.records import KeyRecord
from gatewayd.store.tenant_sql import PROJECT_PATH

_COLUMNS = (
    "key_id, project_id, name, secret_sha256, prefix, models, limits, created_at, expires_at,"
    " revoked_at, last_used_at, band, kind, rotated_from, rotated_to"
)


class PostgresKeys:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def put_key(self, rec: KeyRecord) -> None:
        with self._mapped(f"save key {rec.key_id}"):
            await self._conn.execute(
                f"INSERT INTO api_keys ({_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15)"
                " ON CONFLICT (key_id) DO UPDATE SET name = EXCLUDED.name,"
                " models = EXCLUDED.models, limits = EXCLUDED.limits, expires_at = EXCLUDED.expires_at,"
                " revoked_at = EXCLUDED.revoked_at, last_used_at = EXCLUDED.last_used_at,"
                " band = EXCLUDED.band, kind = EXCLUDED.kind, rotated_from = EXCLUDED.rotated_from,"
                " rotated_to = EXCLUDED.rotated_to",
                rec.key_id,
                rec.project_id,
                rec.name,
                rec.secret_sha256,
                rec.prefix,
                rec.models,
                rec.limits,
                _aware(rec.created_at),
                _aware(rec.expires_at),
                _aware(rec.revoked_at),
                _aware(rec.last_used_at),
                rec.band,
                rec.kind,
                rec.rotated_from,
                rec.rotated_to,
            )

    async def list_keys(self, project_id: str = "") -> list[KeyRecord]:
        sql = f"SELECT {_COLUMNS}, {PROJECT_PATH} FROM api_keys"
        args: list = []
        if project_id:
            sql, args = sql + " WHERE project_id = $1", [project_id]
        with self._mapped("list keys"):
            rows = await self._conn.fetch(sql + ' ORDER BY created_at, key_id COLLATE "C"', *args)
        return [KeyRecord(**dict(r)) for r in rows]

    async def touch_keys(self, used: dict[str, datetime]) -> None:
        if not used:
            return
        with self._mapped(f"note the use of {len(used)} keys"):
            await self._conn.executemany(
                "UPDATE api_keys SET last_used_at = $1 WHERE key_id = $2",
                [(_aware(at), key_id) for key_id, at in used.items()],
            )
