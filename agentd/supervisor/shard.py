"""One engine process under the supervisor's watch: its record, its log, its tasks."""

from __future__ import annotations

import asyncio
import subprocess

from agentd.supervisor.model import LIVE_STATES, ShardInfo, ShardRecord, ShardState
from agentd.supervisor.output import LogRing, OutputFollower


class Shard:
    """The supervisor's working state for one shard (not part of its API)."""

    def __init__(self, record: ShardRecord, ring: LogRing, *, adopted: bool) -> None:
        self.record = record
        self.ring = ring
        self.adopted = adopted
        # The process when this agent started it; None when adopted (not our child).
        self.popen: subprocess.Popen | None = None
        self.follower: OutputFollower | None = None
        self.state: ShardState = "starting"
        self.reason = ""
        # Set once an exit is asked for (a stop, a missed deadline): from then
        # on the process ending is the plan, not a failure to report.
        self.stopping = False
        self.exited = asyncio.Event()
        self.exit_code: int | None = None
        self.tasks: list[asyncio.Task] = []
        self.health_task: asyncio.Task | None = None
        self.stop_task: asyncio.Task | None = None

    @property
    def shard_id(self) -> str:
        return self.record.shard_id

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def cancel_tasks(self) -> list[asyncio.Task]:
        """Cancel its watchers (but not the task calling); returns those cancelled."""
        current = asyncio.current_task()
        cancelled = [t for t in self.tasks if t is not current and not t.done()]
        for task in cancelled:
            task.cancel()
        return cancelled

    def info(self) -> ShardInfo:
        r = self.record
        return ShardInfo(
            shard_id=r.shard_id,
            replica_id=r.replica_id,
            state=self.state,
            reason=self.reason,
            pid=r.pid or None,
            pgid=r.pgid or None,
            port=r.port,
            user=r.user,
            started_at=r.started_at,
            adopted=self.adopted,
            health_url=r.health_url,
            argv_hash=r.argv_hash,
            output_file=r.output_file,
            weights_path=r.weights_path,
        )
