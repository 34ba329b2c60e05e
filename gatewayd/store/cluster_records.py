"""The leader lease, its history and the control planes, as the store keeps them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class LeaseState(BaseModel):
    """A lease's row as it stood after a call, with the store's clock at that moment.

    ``now`` is the store's clock (PostgreSQL's, on PostgreSQL), so a caller
    judges whether the lease is running by the same clock that ends it, not
    by its own.
    """

    name: str
    holder: str = ""  # the last holder; check ``active_holder`` for whether it still holds
    epoch: int = 0
    acquired_at: datetime | None = None
    renewed_at: datetime | None = None
    expires_at: datetime | None = None
    released: bool = False  # given up on a clean stop (expires_at is then when)
    now: datetime

    @property
    def active_holder(self) -> str:
        """Who holds the lease at ``now``; "" while it is free (never taken, lapsed, released)."""
        if self.holder and self.expires_at is not None and self.expires_at > self.now:
            return self.holder
        return ""

    def held_by(self, holder: str) -> bool:
        """Whether ``holder`` holds the lease at ``now``."""
        return bool(holder) and self.active_holder == holder


class LeaderChange(BaseModel):
    """One change of a lease's holder.

    reason: "acquired" (a free or released lease taken), "expired" (taken
    after the previous holder's lease lapsed, by another or by the same one
    again), "released" (given up on a clean stop; ``holder`` is then "").
    """

    name: str
    epoch: int
    holder: str
    previous_holder: str = ""
    at: datetime
    vacant_s: float | None = None  # how long the lease stood empty before, when known
    reason: str


class ControlPlaneRecord(BaseModel):
    """A control plane of the cluster, as it last wrote itself into the store."""

    control_plane_id: str
    hostname: str = ""
    agent_address: str = ""  # host:port agents dial
    http_url: str = ""  # where clients reach its gateway
    admin_listen: str = ""
    version: str = ""
    started_at: datetime
    # Set by the store (its clock) on every write; what callers pass is ignored.
    last_seen_at: datetime | None = None
    store_state: str = ""  # "ok", or what its last store call failed with
    stopped_at: datetime | None = None  # set on a clean stop; cleared when it writes again
