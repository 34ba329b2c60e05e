"""SQLite: the leader lease, its history, and the control planes.

SQLite is one machine, so the process's clock is the store's clock. A claim
runs in one IMMEDIATE transaction: a second process on the same file waits
for the write lock instead of deciding from a row that is about to change.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gatewayd.store.cluster_records import ControlPlaneRecord, LeaderChange, LeaseState
from gatewayd.store.sqlite.codec import _from_text, _to_text

_LEASE_COLUMNS = "name, holder, epoch, acquired_at, renewed_at, expires_at, released"
_CHANGE_COLUMNS = "name, epoch, holder, previous_holder, at, vacant_s, reason"
_CP_COLUMNS = (
    "control_plane_id, hostname, agent_address, http_url, admin_listen, version,"
    " started_at, last_seen_at, store_state, stopped_at"
)


def _lease(row, now: datetime) -> LeaseState:
    return LeaseState(
        name=row["name"],
        holder=row["holder"],
        epoch=row["epoch"],
        acquired_at=_from_text(row["acquired_at"]),
        renewed_at=_from_text(row["renewed_at"]),
        expires_at=_from_text(row["expires_at"]),
        released=bool(row["released"]),
        now=now,
    )


def _control_plane(row) -> ControlPlaneRecord:
    fields = dict(row)
    for name in ("started_at", "last_seen_at", "stopped_at"):
        fields[name] = _from_text(fields[name])
    return ControlPlaneRecord(**fields)


class SqliteCluster:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    def _utc_now(self) -> datetime:
        """The store's clock. (Tests of the lease's rules run it from a clock of their own.)"""
        return datetime.now(UTC)

    async def store_clock(self) -> datetime:
        return self._utc_now()

    async def claim_lease(self, name: str, holder: str, ttl_s: float) -> LeaseState:
        async with self._lock:
            with self._mapped(f"claim the {name} lease for {holder}"):
                async with self._transaction() as db:
                    async with db.execute(
                        f"SELECT {_LEASE_COLUMNS} FROM leader_lease WHERE name = ?", (name,)
                    ) as cur:
                        row = await cur.fetchone()
                    now = self._utc_now()
                    before = None if row is None else _lease(row, now)
                    if before is not None and before.active_holder not in ("", holder):
                        return before  # someone else holds it: nothing changes
                    expires = _to_text(now + timedelta(seconds=ttl_s))
                    if before is not None and before.held_by(holder):
                        await db.execute(
                            "UPDATE leader_lease SET renewed_at = ?, expires_at = ? WHERE name = ?",
                            (_to_text(now), expires, name),
                        )
                    else:
                        epoch = 1 if before is None else before.epoch + 1
                        await db.execute(
                            f"INSERT INTO leader_lease ({_LEASE_COLUMNS})"
                            " VALUES (?, ?, ?, ?, ?, ?, 0)"
                            " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,"
                            " epoch = excluded.epoch, acquired_at = excluded.acquired_at,"
                            " renewed_at = excluded.renewed_at,"
                            " expires_at = excluded.expires_at, released = 0",
                            (name, holder, epoch, _to_text(now), _to_text(now), expires),
                        )
                        await db.execute(
                            f"INSERT INTO leader_changes ({_CHANGE_COLUMNS})"
                            " VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (
                                name,
                                epoch,
                                holder,
                                "" if before is None else before.holder,
                                _to_text(now),
                                _vacant_s(before, now),
                                _reason(before),
                            ),
                        )
                    async with db.execute(
                        f"SELECT {_LEASE_COLUMNS} FROM leader_lease WHERE name = ?", (name,)
                    ) as cur:
                        return _lease(await cur.fetchone(), now)

    async def release_lease(self, name: str, holder: str) -> bool:
        async with self._lock:
            with self._mapped(f"release the {name} lease of {holder}"):
                async with self._transaction() as db:
                    async with db.execute(
                        f"SELECT {_LEASE_COLUMNS} FROM leader_lease WHERE name = ?", (name,)
                    ) as cur:
                        row = await cur.fetchone()
                    now = self._utc_now()
                    if row is None or not _lease(row, now).held_by(holder):
                        return False
                    await db.execute(
                        "UPDATE leader_lease SET expires_at = ?, renewed_at = ?, released = 1"
                        " WHERE name = ?",
                        (_to_text(now), _to_text(now), name),
                    )
                    await db.execute(
                        f"INSERT INTO leader_changes ({_CHANGE_COLUMNS})"
                        " VALUES (?, ?, '', ?, ?, NULL, 'released')",
                        (name, row["epoch"], holder, _to_text(now)),
                    )
                    return True

    async def get_lease(self, name: str) -> LeaseState | None:
        async with self._lock:
            with self._mapped(f"read the {name} lease"):
                async with self._conn.execute(
                    f"SELECT {_LEASE_COLUMNS} FROM leader_lease WHERE name = ?", (name,)
                ) as cur:
                    row = await cur.fetchone()
        return None if row is None else _lease(row, self._utc_now())

    async def leader_changes(self, name: str, limit: int = 50) -> list[LeaderChange]:
        async with self._lock:
            with self._mapped(f"read the changes of the {name} lease"):
                async with self._conn.execute(
                    f"SELECT {_CHANGE_COLUMNS} FROM leader_changes WHERE name = ?"
                    " ORDER BY id DESC LIMIT ?",
                    (name, limit),
                ) as cur:
                    rows = await cur.fetchall()
        return [LeaderChange(**{**dict(r), "at": _from_text(r["at"])}) for r in rows]

    async def put_control_plane(self, rec: ControlPlaneRecord) -> None:
        async with self._lock:
            with self._mapped(f"save control plane {rec.control_plane_id}"):
                await self._conn.execute(
                    f"INSERT INTO control_planes ({_CP_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)"
                    " ON CONFLICT (control_plane_id) DO UPDATE SET"
                    " hostname = excluded.hostname, agent_address = excluded.agent_address,"
                    " http_url = excluded.http_url, admin_listen = excluded.admin_listen,"
                    " version = excluded.version, started_at = excluded.started_at,"
                    " last_seen_at = excluded.last_seen_at,"
                    " store_state = excluded.store_state, stopped_at = NULL",
                    (
                        rec.control_plane_id,
                        rec.hostname,
                        rec.agent_address,
                        rec.http_url,
                        rec.admin_listen,
                        rec.version,
                        _to_text(rec.started_at),
                        _to_text(self._utc_now()),
                        rec.store_state,
                    ),
                )

    async def list_control_planes(self) -> list[ControlPlaneRecord]:
        async with self._lock:
            with self._mapped("list control planes"):
                async with self._conn.execute(
                    f"SELECT {_CP_COLUMNS} FROM control_planes ORDER BY control_plane_id"
                ) as cur:
                    rows = await cur.fetchall()
        return [_control_plane(r) for r in rows]

    async def mark_control_plane_stopped(self, cp_id: str) -> None:
        async with self._lock:
            with self._mapped(f"mark control plane {cp_id} stopped"):
                await self._conn.execute(
                    "UPDATE control_planes SET stopped_at = ? WHERE control_plane_id = ?",
                    (_to_text(self._utc_now()), cp_id),
                )

    async def delete_control_plane(self, cp_id: str) -> bool:
        async with self._lock:
            with self._mapped(f"forget control plane {cp_id}"):
                cur = await self._conn.execute(
                    "DELETE FROM control_planes WHERE control_plane_id = ?", (cp_id,)
                )
                return cur.rowcount == 1


def _reason(before: LeaseState | None) -> str:
    """Why a claim changed the holder: a free or released lease, or one that lapsed."""
    if before is None or not before.holder or before.released:
        return "acquired"
    return "expired"


def _vacant_s(before: LeaseState | None, now: datetime) -> float | None:
    if before is None or before.expires_at is None:
        return None
    return (now - before.expires_at).total_seconds()
