"""PostgreSQL: the catalog (models), replicas and the drain overlay."""

from __future__ import annotations

from datetime import datetime

from gatewayd.store.records import ModelRecord, ReplicaRecord


class PostgresCatalog:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def put_model(self, rec: ModelRecord) -> None:
        with self._mapped(f"save model {rec.name}"):
            await self._conn.execute(
                "INSERT INTO models (name, spec, created_at, updated_at) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec,"
                " updated_at = EXCLUDED.updated_at",
                rec.name,
                rec.spec,
                _aware(rec.created_at),
                _aware(rec.updated_at),
            )

    async def get_model(self, name: str) -> ModelRecord | None:
        with self._mapped(f"read model {name}"):
            row = await self._conn.fetchrow(
                "SELECT name, spec, created_at, updated_at FROM models WHERE name = $1", name
            )
        return None if row is None else ModelRecord(**dict(row))

    async def list_models(self) -> list[ModelRecord]:
        with self._mapped("list models"):
            rows = await self._conn.fetch(
                'SELECT name, spec, created_at, updated_at FROM models ORDER BY name COLLATE "C"'
            )
        return [ModelRecord(**dict(r)) for r in rows]

    async def delete_model(self, name: str) -> bool:
        with self._mapped(f"remove model {name}"):
            found = await self._conn.fetchval(
                "DELETE FROM models WHERE name = $1 RETURNING true", name
            )
        return bool(found)

    async def put_replica(self, rec: ReplicaRecord) -> None:
        with self._mapped(f"save replica {rec.replica_id}"):
            await self._conn.execute(
                "INSERT INTO replicas (replica_id, model, doc, updated_at) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (replica_id) DO UPDATE SET model = EXCLUDED.model,"
                " doc = EXCLUDED.doc, updated_at = EXCLUDED.updated_at",
                rec.replica_id,
                rec.model,
                rec.doc,
                _aware(rec.updated_at),
            )

    async def list_replicas(self, model: str = "") -> list[ReplicaRecord]:
        sql = "SELECT replica_id, model, doc, updated_at FROM replicas"
        args: list = []
        if model:
            sql, args = sql + " WHERE model = $1", [model]
        with self._mapped("list replicas"):
            rows = await self._conn.fetch(sql + ' ORDER BY replica_id COLLATE "C"', *args)
        return [ReplicaRecord(**dict(r)) for r in rows]

    async def delete_replica(self, replica_id: str) -> bool:
        with self._mapped(f"remove replica {replica_id}"):
            found = await self._conn.fetchval(
                "DELETE FROM replicas WHERE replica_id = $1 RETURNING true", replica_id
            )
        return bool(found)

    async def set_node_draining(self, node_id: str, draining: bool) -> bool:
        with self._mapped(f"drain node {node_id}"):
            found = await self._conn.fetchval(
                "UPDATE nodes SET draining = $2 WHERE node_id = $1 RETURNING true",
                node_id,
                draining,
            )
        return bool(found)


def _aware(dt: datetime | None) -> datetime | None:
    if dt is not None and dt.tzinfo is None:
        # asyncpg would read a naive datetime as local time; refuse rather than guess.
        raise ValueError(f"datetime {dt.isoformat()} has no timezone; the store needs aware ones")
    return dt
