"""What agents report of their shards, and what the clock says: the replicas' lifecycle.

A mixin of the Reconciler (gatewayd/controller/reconciler.py): shard reports
move replicas through their states; a deadline that passes moves one on with
a reason; a node lost for longer than the lost grace has its replicas placed
elsewhere; a failure waits a backoff (2, 4, 8 … seconds, at most 5 minutes)
before the replica is started again.
"""

from __future__ import annotations

from datetime import timedelta

from gatewayd.controller import replica as rs
from gatewayd.controller.replica import Replica, utcnow
from gatewayd.nodes.registry import READY as NODE_READY
from proto.llmgw.v1 import ControlMessage, ShardStatus, StopShard

# Restart backoff after a failure: 2, 4, 8 … seconds, at most 5 minutes.
BACKOFF_MAX_S = 300.0
STOP_GRACE_S = 10

# Agent shard states and the replica states they mean.
_SHARD_STATES = {
    "fetching": rs.FETCHING,
    "installing": rs.INSTALLING,
    "starting": rs.STARTING,
    "ready": rs.READY,
    "failed": rs.FAILED,
    "stopped": rs.STOPPED,
}


class Lifecycle:
    """Reports and deadlines; the Reconciler provides the state it works on."""

    def _fail(self, r: Replica, why: str) -> None:
        delay = min(2 ** min(r.restarts + 1, 9), BACKOFF_MAX_S)
        r.retry_at = utcnow() + timedelta(seconds=delay)
        r.move(rs.FAILED, f"{why}; restarting in {delay:g} s")

    # ---- reports from agents -------------------------------------------

    async def on_shard_status(self, node_id: str, status: ShardStatus) -> None:
        async with self._lock:
            r = self.replicas.get(status.replica_id or status.shard_id)
            if r is None or r.node_id != node_id:
                # Not ours (removed while the node was away): stop it there.
                if status.state not in ("stopped", "failed"):
                    await self._registry.command(
                        node_id,
                        ControlMessage(
                            stop_shard=StopShard(
                                shard_id=status.shard_id,
                                reason="no such replica",
                                grace_s=STOP_GRACE_S,
                            )
                        ),
                    )
                return
            state = _SHARD_STATES.get(status.state)
            if state is None:
                return
            if status.port:
                r.port = status.port
            if status.pid:
                r.pid = status.pid
            if status.fetch is not None:
                r.fetch_done_bytes = status.fetch.bytes_done
                r.fetch_total_bytes = status.fetch.bytes_total
            profile_timeout = self._timeout(r)
            if state == rs.FAILED:
                if r.state in (rs.DRAINING, rs.STOPPED):
                    r.move(rs.STOPPED, status.reason or "stopped")
                else:
                    self._fail(r, status.reason or "the engine failed")
            elif state == rs.STOPPED:
                # A second "stopped" for a replica already stopped is not a failure.
                if r.state in (rs.DRAINING, rs.STOPPED) or r.model not in self._catalog.names():
                    r.move(rs.STOPPED, status.reason or r.reason)
                else:
                    self._fail(r, status.reason or "the engine stopped")
            elif state == r.state and state in (rs.FETCHING, rs.INSTALLING):
                # Progress: the startup deadline counts from the latest of it.
                r.reason = status.reason or r.reason
                r.extend_deadline(profile_timeout)
            elif r.state != rs.DRAINING:
                deadline = None if state == rs.READY else profile_timeout
                reason = status.reason or (
                    "adopted after an agent restart" if status.adopted else state
                )
                r.move(state, reason, deadline_s=deadline)
            await self._save(r)
            self.kick()

    def _timeout(self, r: Replica) -> float:
        model = self._catalog.get(r.model)
        return model.profiles[0].startup_timeout_s if model and model.profiles else 900.0

    # ---- deadlines and lost nodes --------------------------------------

    async def _expire_deadlines(self) -> None:
        now = utcnow()
        for r in list(self.replicas.values()):
            if r.deadline is None or r.deadline > now:
                continue
            if r.state == rs.DRAINING:
                r.move(rs.STOPPED, f"{r.reason}; the node did not confirm the stop in time")
            elif r.state in (rs.PLACED, rs.FETCHING, rs.INSTALLING, rs.STARTING):
                waited = int((now - r.since).total_seconds())
                self._fail(r, f"not ready after {waited} s in {r.state} (deadline passed)")
                if r.node_id:
                    await self._registry.command(
                        r.node_id,
                        ControlMessage(
                            stop_shard=StopShard(
                                shard_id=r.shard_id, reason="deadline passed", grace_s=STOP_GRACE_S
                            )
                        ),
                    )
            else:
                r.deadline = None
            await self._save(r)

    async def _handle_lost_nodes(self) -> None:
        now = utcnow()
        for live in self._registry.live_nodes():
            rec = live.record
            if rec.state == NODE_READY:
                continue
            away_s = (now - rec.state_since).total_seconds()
            if away_s < self._lost_grace_s:
                continue
            for r in self.replicas.values():
                if r.node_id == rec.node_id and r.state in rs.ACTIVE:
                    self._fail(r, f"node {rec.node_id} lost for {int(away_s)} s ({rec.reason})")
                    r.retry_at = now  # place it elsewhere at once
                    await self._save(r)
