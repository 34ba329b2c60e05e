"""SQLite: the catalog (models), replicas and the drain overlay."""

from __future__ import annotations

import json

from gatewayd.store.records import ModelRecord, ReplicaRecord
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text


class SqliteCatalog:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def put_model(self, rec: ModelRecord) -> None:
        async with self._lock:
            with self._mapped(f"save model {rec.name}"):
                await self._conn.execute(
                    "INSERT INTO models (name, spec, created_at, updated_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (name) DO UPDATE SET spec = excluded.spec,"
                    " updated_at = excluded.updated_at",
                    (rec.name, _json(rec.spec), _to_text(rec.created_at), _to_text(rec.updated_at)),
                )

    async def get_model(self, name: str) -> ModelRecord | None:
        async with self._lock:
            with self._mapped(f"read model {name}"):
                async with self._conn.execute(
                    "SELECT name, spec, created_at, updated_at FROM models WHERE name = ?", (name,)
                ) as cur:
                    row = await cur.fetchone()
        return None if row is None else _model(row)

    async def list_models(self) -> list[ModelRecord]:
        async with self._lock:
            with self._mapped("list models"):
                async with self._conn.execute(
                    "SELECT name, spec, created_at, updated_at FROM models ORDER BY name"
                ) as cur:
                    rows = await cur.fetchall()
        return [_model(r) for r in rows]

    async def delete_model(self, name: str) -> bool:
        async with self._lock:
            with self._mapped(f"remove model {name}"):
                async with self._conn.execute("DELETE FROM models WHERE name = ?", (name,)) as cur:
                    return cur.rowcount == 1

    async def put_replica(self, rec: ReplicaRecord) -> None:
        async with self._lock:
            with self._mapped(f"save replica {rec.replica_id}"):
                await self._conn.execute(
                    "INSERT INTO replicas (replica_id, model, doc, updated_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (replica_id) DO UPDATE SET model = excluded.model,"
                    " doc = excluded.doc, updated_at = excluded.updated_at",
                    (rec.replica_id, rec.model, _json(rec.doc), _to_text(rec.updated_at)),
                )

    async def list_replicas(self, model: str = "") -> list[ReplicaRecord]:
        sql = "SELECT replica_id, model, doc, updated_at FROM replicas"
        args: tuple = ()
        if model:
            sql, args = sql + " WHERE model = ?", (model,)
        async with self._lock:
            with self._mapped("list replicas"):
                async with self._conn.execute(sql + " ORDER BY replica_id", args) as cur:
                    rows = await cur.fetchall()
        return [_replica(r) for r in rows]

    async def delete_replica(self, replica_id: str) -> bool:
        async with self._lock:
            with self._mapped(f"remove replica {replica_id}"):
                async with self._conn.execute(
                    "DELETE FROM replicas WHERE replica_id = ?", (replica_id,)
                ) as cur:
                    return cur.rowcount == 1

    async def set_node_draining(self, node_id: str, draining: bool) -> bool:
        async with self._lock:
            with self._mapped(f"drain node {node_id}"):
                async with self._conn.execute(
                    "UPDATE nodes SET draining = ? WHERE node_id = ?", (int(draining), node_id)
                ) as cur:
                    return cur.rowcount == 1


def _model(row) -> ModelRecord:
    return ModelRecord(
        name=row["name"],
        spec=json.loads(row["spec"]),
        created_at=_from_text(row["created_at"]),
        updated_at=_from_text(row["updated_at"]),
    )


def _replica(row) -> ReplicaRecord:
    return ReplicaRecord(
        replica_id=row["replica_id"],
        model=row["model"],
        doc=json.loads(row["doc"]),
        updated_at=_from_text(row["updated_at"]),
    )
