"""SQLite: API keys (hashes only)."""

from __future__ import annotations

import json
from datetime import datetime

from gatewayd.store.records import KeyRecord
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text
from gatewayd.store.tenant_sql import PROJECT_PATH

_COLUMNS = (
    "key_id, project_id, name, secret_sha256, prefix, models, limits, created_at, expires_at,"
    " revoked_at, last_used_at, band, kind, rotated_from, rotated_to"
)


def _opt(dt: datetime | None) -> str | None:
    return None if dt is None else _to_text(dt)


class SqliteKeys:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def put_key(self, rec: KeyRecord) -> None:
        async with self._lock:
            with self._mapped(f"save key {rec.key_id}"):
                await self._conn.execute(
                    f"INSERT INTO api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (key_id) DO UPDATE SET name = excluded.name,"
                    " models = excluded.models, limits = excluded.limits, expires_at = excluded.expires_at,"
                    " revoked_at = excluded.revoked_at, last_used_at = excluded.last_used_at,"
                    " band = excluded.band, kind = excluded.kind, rotated_from = excluded.rotated_from,"
                    " rotated_to = excluded.rotated_to",
                    (
                        rec.key_id,
                        rec.project_id,
                        rec.name,
                        rec.secret_sha256,
                        rec.prefix,
                        _json(rec.models),
                        _json(rec.limits),
                        _to_text(rec.created_at),
                        _opt(rec.expires_at),
                        _opt(rec.revoked_at),
                        _opt(rec.last_used_at),
                        rec.band,
                        rec.kind,
                        rec.rotated_from,
                        rec.rotated_to,
                    ),
                )

    async def list_keys(self, project_id: str = "") -> list[KeyRecord]:
        sql = f"SELECT {_COLUMNS}, {PROJECT_PATH} FROM api_keys"
        args: tuple = ()
        if project_id:
            sql, args = sql + " WHERE project_id = ?", (project_id,)
        async with self._lock:
            with self._mapped("list keys"):
                async with self._conn.execute(sql + " ORDER BY created_at, key_id", args) as cur:
                    rows = await cur.fetchall()
        return [
            KeyRecord(
                key_id=r["key_id"],
                project_id=r["project_id"],
                project=r["project"],
                name=r["name"],
                secret_sha256=r["secret_sha256"],
                prefix=r["prefix"],
                models=json.loads(r["models"]),
                limits=json.loads(r["limits"]),
                created_at=_from_text(r["created_at"]),
                expires_at=_from_text(r["expires_at"]),
                revoked_at=_from_text(r["revoked_at"]),
                last_used_at=_from_text(r["last_used_at"]),
                band=r["band"],
                kind=r["kind"],
                rotated_from=r["rotated_from"],
                rotated_to=r["rotated_to"],
            )
            for r in rows
        ]

    async def touch_keys(self, used: dict[str, datetime]) -> None:
        if not used:
            return
        async with self._lock:
            with self._mapped(f"note the use of {len(used)} keys"):
                async with self._transaction() as db:
                    await db.executemany(
                        "UPDATE api_keys SET last_used_at = ? WHERE key_id = ?",
                        [(_to_text(at), key_id) for key_id, at in used.items()],
                    )
