"""The control planes of a cluster, as each writes itself into the shared store.

Every control plane writes its row every few seconds; a row not written for
a lease's length is "gone". The leader sends agents the live members'
agent addresses as their failover list, its own first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta

from gatewayd.cluster.lease import LeaderLease
from gatewayd.store import ControlPlaneRecord, Store
from llmgw.aio import within
from llmgw.errors import StoreError
from proto.llmgw.v1 import ControlPlaneView

log = logging.getLogger(__name__)

# 2 s: several writes within the 10 s lease, so one missed write never makes
# a live control plane look gone.
DEFAULT_EVERY_S = 2.0
# A status call answers from what was last read rather than wait on a hung store.
READ_LIMIT_S = 2.0

_ROLE_ORDER = {"leader": 0, "standby": 1, "gone": 2}


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


class Members:
    """This control plane's row in the store, and everyone's as last read."""

    def __init__(
        self,
        store: Store,
        record: ControlPlaneRecord,
        lease: LeaderLease,
        *,
        every_s: float = DEFAULT_EVERY_S,
    ):
        self.store = store
        self.record = record
        self.lease = lease
        self.every_s = every_s
        self._rows: list[ControlPlaneRecord] = []
        # The store's clock when the rows were read, and ours at that moment,
        # so what was read can be judged later without asking the store again.
        self._read_at: datetime | None = None
        self._read_at_mono = 0.0
        self._stopped = False
        self._write_lock = asyncio.Lock()
        self._write_failed = ""

    @property
    def control_plane_id(self) -> str:
        return self.record.control_plane_id

    async def run(self) -> None:
        """Write this control plane's row every ``every_s`` until cancelled or stopped()."""
        while not self._stopped:
            await self.write()
            await asyncio.sleep(self.every_s)

    async def write(self) -> bool:
        """Write this control plane's row once and read everyone's; False when the store failed."""
        async with self._write_lock:
            if self._stopped:
                return False
            rec = self.record.model_copy(update={"store_state": self.lease.store_state})
            try:
                await within(self.store.put_control_plane(rec), self.lease.ttl_s)
                await self._read()
            except (StoreError, TimeoutError) as e:
                words = getattr(e, "message", "") or "the store did not answer"
                if words != self._write_failed:
                    log.warning(
                        "control plane %s: could not write its row: %s", rec.control_plane_id, words
                    )
                self._write_failed = words
                return False
            self._write_failed = ""
            return True

    async def stopped(self) -> None:
        """Clean stop: no more writes, and the row says it stopped (a standby's list drops it)."""
        async with self._write_lock:
            self._stopped = True
            try:
                await within(
                    self.store.mark_control_plane_stopped(self.control_plane_id), READ_LIMIT_S
                )
            except (StoreError, TimeoutError) as e:
                log.warning(
                    "control plane %s: could not record its stop (%s); it shows as gone "
                    "once its row is %.0f s old",
                    self.control_plane_id,
                    getattr(e, "message", "") or "the store did not answer",
                    self.lease.ttl_s,
                )

    async def views(self) -> list[ControlPlaneView]:
        """Every control plane with its role, the leader first; from the last read when the
        store does not answer now."""
        leader = self.lease.leader_id
        leader_since = self.lease.leader_since
        try:
            state = await within(self.store.get_lease(self.lease.name), READ_LIMIT_S)
            await within(self._read(), READ_LIMIT_S)
        except (StoreError, TimeoutError):
            pass
        else:
            if state is not None:
                leader = state.active_holder
                leader_since = state.acquired_at if leader else None
        now = self._store_now()
        views = [self._view(r, now, leader, leader_since) for r in self._with_own_row()]
        views.sort(key=lambda v: (_ROLE_ORDER[v.role], v.control_plane_id))
        return views

    def agent_addresses(self) -> list[str]:
        """The live members' agent addresses, the leader's first: an agent's failover list."""
        now = self._store_now()
        leader = self.lease.leader_id
        live = [
            r
            for r in self._with_own_row()
            if r.agent_address and self._role(r, now, leader) != "gone"
        ]
        live.sort(key=lambda r: (self._role(r, now, leader) != "leader", r.control_plane_id))
        return list(dict.fromkeys(r.agent_address for r in live))

    def leader_agent_address(self) -> str:
        """The agent address of the control plane leading now ("" while none is known)."""
        now = self._store_now()
        leader = self.lease.leader_id
        for rec in self._with_own_row():
            if rec.agent_address and self._role(rec, now, leader) == "leader":
                return rec.agent_address
        return ""

    @property
    def rows(self) -> list[ControlPlaneRecord]:
        """Every control plane as last read from the store, this one's own row as it is now."""
        return self._with_own_row()

    # ---- inside ----

    async def _read(self) -> None:
        rows = await self.store.list_control_planes()
        now = await self.store.store_clock()
        self._rows, self._read_at, self._read_at_mono = rows, now, time.monotonic()

    def _store_now(self) -> datetime | None:
        if self._read_at is None:
            return None
        return self._read_at + timedelta(seconds=time.monotonic() - self._read_at_mono)

    def _with_own_row(self) -> list[ControlPlaneRecord]:
        """The rows read, with this control plane's own as it is now (it is alive: it asks)."""
        others = [r for r in self._rows if r.control_plane_id != self.control_plane_id]
        mine = next((r for r in self._rows if r.control_plane_id == self.control_plane_id), None)
        own = self.record.model_copy(
            update={
                "store_state": self.lease.store_state,
                "last_seen_at": mine.last_seen_at if mine else None,
                "stopped_at": None,
            }
        )
        return [own, *others]

    def _role(self, rec: ControlPlaneRecord, now: datetime | None, leader: str) -> str:
        if rec.control_plane_id == self.control_plane_id:
            # Its own role is what its lease says this instant, not the row.
            return "leader" if self.lease.held() else "standby"
        if rec.stopped_at is not None:
            return "gone"
        seen = rec.last_seen_at
        if now is not None and seen is not None and (now - seen).total_seconds() > self.lease.ttl_s:
            return "gone"
        return "leader" if rec.control_plane_id == leader else "standby"

    def _view(
        self,
        rec: ControlPlaneRecord,
        now: datetime | None,
        leader: str,
        leader_since: datetime | None,
    ) -> ControlPlaneView:
        role = self._role(rec, now, leader)
        return ControlPlaneView(
            control_plane_id=rec.control_plane_id,
            hostname=rec.hostname,
            agent_address=rec.agent_address,
            http_url=rec.http_url,
            version=rec.version,
            started_at=_iso(rec.started_at),
            last_seen_at=_iso(rec.last_seen_at),
            role=role,
            leader_since=_iso(leader_since) if role == "leader" else "",
            store_state=rec.store_state,
        )
