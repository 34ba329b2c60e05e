"""SQLite: stored responses (``/v1/responses``) and each project's retention of them."""

from __future__ import annotations

import json
from datetime import datetime

from gatewayd.store.response_records import StoredResponse
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text
from gatewayd.store.tenant_sql import PROJECT_PATH


class SqliteResponses:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def set_retention(self, tenant_id: str, retain_s: int) -> bool:
        async with self._lock:
            with self._mapped(f"set the retention of {tenant_id}"):
                async with self._transaction() as db:
                    cur = await db.execute(
                        "UPDATE tenants SET retain_responses_s = ? WHERE id = ?",
                        (retain_s, tenant_id),
                    )
                    if cur.rowcount != 1:
                        return False
                    if retain_s == 0:
                        await db.execute("DELETE FROM responses WHERE project_id = ?", (tenant_id,))
                return True

    async def retentions(self) -> dict[str, int]:
        async with self._lock:
            with self._mapped("read the retention of stored responses"):
                async with self._conn.execute(
                    "SELECT id, retain_responses_s FROM tenants WHERE retain_responses_s > 0"
                ) as cur:
                    rows = await cur.fetchall()
        return {r["id"]: r["retain_responses_s"] for r in rows}

    async def retention_of(self, tenant_id: str) -> int:
        async with self._lock:
            with self._mapped(f"read the retention of {tenant_id}"):
                async with self._conn.execute(
                    "SELECT retain_responses_s FROM tenants WHERE id = ?", (tenant_id,)
                ) as cur:
                    row = await cur.fetchone()
        return row["retain_responses_s"] if row is not None else 0

    async def put_response(self, rec: StoredResponse) -> None:
        async with self._lock:
            with self._mapped(f"store response {rec.id}"):
                await self._conn.execute(
                    "INSERT INTO responses (id, project_id, key_id, created_at, expires_at, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (id) DO UPDATE SET body = excluded.body,"
                    " expires_at = excluded.expires_at",
                    (
                        rec.id,
                        rec.project_id,
                        rec.key_id,
                        _to_text(rec.created_at),
                        _to_text(rec.expires_at),
                        _json(rec.body()),
                    ),
                )

    async def get_response(
        self, project_id: str, response_id: str, now: datetime
    ) -> StoredResponse | None:
        async with self._lock:
            with self._mapped(f"read response {response_id}"):
                async with self._conn.execute(
                    f"SELECT id, project_id, {PROJECT_PATH}, key_id, created_at, expires_at, body"
                    " FROM responses WHERE id = ? AND project_id = ? AND expires_at > ?",
                    (response_id, project_id, _to_text(now)),
                ) as cur:
                    row = await cur.fetchone()
        if row is None:
            return None
        body = json.loads(row["body"])
        return StoredResponse(
            id=row["id"],
            project_id=row["project_id"],
            project=row["project"],
            key_id=row["key_id"],
            created_at=_from_text(row["created_at"]),
            expires_at=_from_text(row["expires_at"]),
            response=body.get("response") or {},
            input_items=body.get("input") or [],
            history=body.get("history") or [],
        )

    async def delete_response(self, project_id: str, response_id: str) -> bool:
        async with self._lock:
            with self._mapped(f"delete response {response_id}"):
                cur = await self._conn.execute(
                    "DELETE FROM responses WHERE id = ? AND project_id = ?",
                    (response_id, project_id),
                )
                return cur.rowcount == 1

    async def expire_responses(self, now: datetime) -> int:
        async with self._lock:
            with self._mapped("forget expired responses"):
                cur = await self._conn.execute(
                    "DELETE FROM responses WHERE expires_at <= ?", (_to_text(now),)
                )
                return cur.rowcount
