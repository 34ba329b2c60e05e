"""A replica and its state machine (ARCHITECTURE.md §5).

pending → placed → fetching → installing → starting → ready → draining → stopped,
or failed. Every state records when it began, why (in plain words, the
node's own where it knows), and a deadline; the reconciler moves a replica
on when its deadline passes, so none waits silently.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, Field

PENDING = "pending"
PLACED = "placed"
FETCHING = "fetching"
INSTALLING = "installing"
STARTING = "starting"
READY = "ready"
DRAINING = "draining"
STOPPED = "stopped"
FAILED = "failed"

# States in which the replica holds (or is about to hold) resources on a node.
ACTIVE = (PLACED, FETCHING, INSTALLING, STARTING, READY, DRAINING)
# At most this many transitions are kept per replica.
HISTORY_MAX = 50


def utcnow() -> datetime:
    return datetime.now(UTC)


class ReplicaEvent(BaseModel):
    at: datetime
    state: str
    reason: str


class Replica(BaseModel):
    """What the store keeps of a replica (as ReplicaRecord.doc)."""

    replica_id: str
    model: str
    profile: str = "default"
    node_id: str = ""
    gpu_indexes: list[int] = Field(default_factory=list)
    per_gpu_bytes: dict[int, int] = Field(default_factory=dict)
    host_memory_bytes: int = 0
    # CPU cores it reserves on its node (a CPU replica of a profile with cores).
    cores: int = 0
    cpu: bool = False
    tensor_parallel: int = 1
    context: int = 0
    port: int = 0
    pid: int = 0
    state: str = PENDING
    reason: str = ""
    since: datetime = Field(default_factory=utcnow)
    deadline: datetime | None = None
    restarts: int = 0
    # Which rotation of the engine keys its key is of (ctl engines rotate-key).
    key_epoch: int = 0
    # When to try again after a failure (backoff); None: not waiting.
    retry_at: datetime | None = None
    fetch_done_bytes: int = 0
    fetch_total_bytes: int = 0
    # Set when this replica replaces another (a draining node, a changed spec).
    replaces: str = ""
    # What the replica was started with: a different hash means it must be replaced.
    spec_hash: str = ""
    # Draining, its StopShard not sent yet: it waits for its requests to finish.
    drain_pending: bool = False
    # Drained to give its cards over to this replica (of a higher class, or its replacement).
    given_to: str = ""
    history: list[ReplicaEvent] = Field(default_factory=list)

    @property
    def made_at(self) -> datetime:
        """When the replica was made (its first state; ``since`` moves with every reason)."""
        return self.history[0].at if self.history else self.since

    @property
    def shard_id(self) -> str:
        # One shard per replica for now: replicas span one node.
        return self.replica_id

    def move(self, state: str, reason: str, *, deadline_s: float | None = None) -> bool:
        """Enter ``state``; returns False when nothing changed."""
        if state == self.state and reason == self.reason:
            return False
        now = utcnow()
        self.state, self.reason, self.since = state, reason, now
        self.deadline = now + timedelta(seconds=deadline_s) if deadline_s else None
        self.history.append(ReplicaEvent(at=now, state=state, reason=reason))
        del self.history[:-HISTORY_MAX]
        return True

    def extend_deadline(self, seconds: float) -> None:
        """Progress (bytes fetched, an install step) pushes the startup deadline out."""
        self.deadline = utcnow() + timedelta(seconds=seconds)
