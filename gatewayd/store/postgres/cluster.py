"""PostgreSQL: the leader lease, its history, and the control planes.

Claims and releases are the functions migration 0012 defines: one statement
each, timed by the database's own clock, so no control plane's clock and no
control plane frozen half-way through a transaction decides who leads.
"""

from __future__ import annotations

from datetime import datetime

from gatewayd.store.cluster_records import ControlPlaneRecord, LeaderChange, LeaseState
from gatewayd.store.postgres.catalog import _aware

_CP_COLUMNS = (
    "control_plane_id, hostname, agent_address, http_url, admin_listen, version,"
    " started_at, last_seen_at, store_state, stopped_at"
)


class PostgresCluster:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def claim_lease(self, name: str, holder: str, ttl_s: float) -> LeaseState:
        with self._mapped(f"claim the {name} lease for {holder}"):
            row = await self._conn.fetchrow(
                "SELECT * FROM llmgw_claim_lease($1, $2, $3)", name, holder, float(ttl_s)
            )
        return LeaseState(name=name, **dict(row))

    async def release_lease(self, name: str, holder: str) -> bool:
        with self._mapped(f"release the {name} lease of {holder}"):
            return bool(
                await self._conn.fetchval("SELECT llmgw_release_lease($1, $2)", name, holder)
            )

    async def get_lease(self, name: str) -> LeaseState | None:
        with self._mapped(f"read the {name} lease"):
            row = await self._conn.fetchrow(
                "SELECT name, holder, epoch, acquired_at, renewed_at, expires_at, released,"
                " clock_timestamp() AS now FROM leader_lease WHERE name = $1",
                name,
            )
        return None if row is None else LeaseState(**dict(row))

    async def leader_changes(self, name: str, limit: int = 50) -> list[LeaderChange]:
        with self._mapped(f"read the changes of the {name} lease"):
            rows = await self._conn.fetch(
                "SELECT name, epoch, holder, previous_holder, at, vacant_s, reason"
                " FROM leader_changes WHERE name = $1 ORDER BY id DESC LIMIT $2",
                name,
                limit,
            )
        return [LeaderChange(**dict(r)) for r in rows]

    async def put_control_plane(self, rec: ControlPlaneRecord) -> None:
        with self._mapped(f"save control plane {rec.control_plane_id}"):
            await self._conn.execute(
                f"INSERT INTO control_planes ({_CP_COLUMNS})"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp(), $8, NULL)"
                " ON CONFLICT (control_plane_id) DO UPDATE SET"
                " hostname = EXCLUDED.hostname, agent_address = EXCLUDED.agent_address,"
                " http_url = EXCLUDED.http_url, admin_listen = EXCLUDED.admin_listen,"
                " version = EXCLUDED.version, started_at = EXCLUDED.started_at,"
                " last_seen_at = EXCLUDED.last_seen_at,"
                " store_state = EXCLUDED.store_state, stopped_at = NULL",
                rec.control_plane_id,
                rec.hostname,
                rec.agent_address,
                rec.http_url,
                rec.admin_listen,
                rec.version,
                _aware(rec.started_at),
                rec.store_state,
            )

    async def list_control_planes(self) -> list[ControlPlaneRecord]:
        with self._mapped("list control planes"):
            rows = await self._conn.fetch(
                f'SELECT {_CP_COLUMNS} FROM control_planes ORDER BY control_plane_id COLLATE "C"'
            )
        return [ControlPlaneRecord(**dict(r)) for r in rows]

    async def mark_control_plane_stopped(self, cp_id: str) -> None:
        with self._mapped(f"mark control plane {cp_id} stopped"):
            await self._conn.execute(
                "UPDATE control_planes SET stopped_at = clock_timestamp()"
                " WHERE control_plane_id = $1",
                cp_id,
            )

    async def delete_control_plane(self, cp_id: str) -> bool:
        with self._mapped(f"forget control plane {cp_id}"):
            status = await self._conn.execute(
                "DELETE FROM control_planes WHERE control_plane_id = $1", cp_id
            )
        return status == "DELETE 1"

    async def store_clock(self) -> datetime:
        with self._mapped("read the database's clock"):
            return await self._conn.fetchval("SELECT clock_timestamp()")
