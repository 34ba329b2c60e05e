"""PostgreSQL: stored responses (``/v1/responses``) and each project's retention of them."""

from __future__ import annotations

from datetime import datetime

from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.response_records import StoredResponse
from gatewayd.store.tenant_sql import PROJECT_PATH


class PostgresResponses:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def set_retention(self, tenant_id: str, retain_s: int) -> bool:
        with self._mapped(f"set the retention of {tenant_id}"):
            async with self._conn.acquire() as conn, conn.transaction():
                status = await conn.execute(
                    "UPDATE tenants SET retain_responses_s = $1 WHERE id = $2", retain_s, tenant_id
                )
                if status != "UPDATE 1":
                    return False
                if retain_s == 0:
                    await conn.execute("DELETE FROM responses WHERE project_id = $1", tenant_id)
        return True

    async def retentions(self) -> dict[str, int]:
        with self._mapped("read the retention of stored responses"):
            rows = await self._conn.fetch(
                "SELECT id, retain_responses_s FROM tenants WHERE retain_responses_s > 0"
            )
        return {r["id"]: r["retain_responses_s"] for r in rows}

    async def retention_of(self, tenant_id: str) -> int:
        with self._mapped(f"read the retention of {tenant_id}"):
            value = await self._conn.fetchval(
                "SELECT retain_responses_s FROM tenants WHERE id = $1", tenant_id
            )
        return value or 0

    async def put_response(self, rec: StoredResponse) -> None:
        with self._mapped(f"store response {rec.id}"):
            await self._conn.execute(
                "INSERT INTO responses (id, project_id, key_id, created_at, expires_at, body)"
                " VALUES ($1, $2, $3, $4, $5, $6)"
                " ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body,"
                " expires_at = EXCLUDED.expires_at",
                rec.id,
                rec.project_id,
                rec.key_id,
                _aware(rec.created_at),
                _aware(rec.expires_at),
                rec.body(),
            )

    async def get_response(
        self, project_id: str, response_id: str, now: datetime
    ) -> StoredResponse | None:
        with self._mapped(f"read response {response_id}"):
            row = await self._conn.fetchrow(
                f"SELECT id, project_id, {PROJECT_PATH}, key_id, created_at, expires_at, body"
                " FROM responses WHERE id = $1 AND project_id = $2 AND expires_at > $3",
                response_id,
                project_id,
                _aware(now),
            )
        if row is None:
            return None
        body = row["body"]
        return StoredResponse(
            id=row["id"],
            project_id=row["project_id"],
            project=row["project"],
            key_id=row["key_id"],
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            response=body.get("response") or {},
            input_items=body.get("input") or [],
            history=body.get("history") or [],
        )

    async def delete_response(self, project_id: str, response_id: str) -> bool:
        with self._mapped(f"delete response {response_id}"):
            status = await self._conn.execute(
                "DELETE FROM responses WHERE id = $1 AND project_id = $2", response_id, project_id
            )
        return status == "DELETE 1"

    async def expire_responses(self, now: datetime) -> int:
        with self._mapped("forget expired responses"):
            status = await self._conn.execute(
                "DELETE FROM responses WHERE expires_at <= $1", _aware(now)
            )
        return int(status.rsplit(" ", 1)[-1])
