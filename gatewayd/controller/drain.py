"""Stopping a replica that answers: drained first, so nothing is cut off mid-answer.

A ready replica the reconciler stops (scaled down, replaced, given over to
a model of a higher class, its node drained, its model removed) goes to
``draining`` at once: the gateways route nothing new to it from then on (a
standby sees it within its second's reload). Its StopShard is sent once
what it runs has finished — the gateway has nothing in flight on it and its
engine reports nothing running or queued — or when ``drain_timeout_s``
passes, whichever comes first. A replica that is not ready yet answers
nobody and is stopped at once.

A mixin of the Reconciler (gatewayd/controller/reconciler.py).
"""

from __future__ import annotations

from datetime import timedelta

from gatewayd.controller import replica as rs
from gatewayd.controller.lifecycle import STOP_GRACE_S
from gatewayd.controller.replica import Replica, utcnow
from proto.llmgw.v1 import ControlMessage, StopShard

# A draining replica waits at least this long before it is judged idle: a
# standby control plane routes by the replicas it reloads each second.
DRAIN_SETTLE_S = 1.0


class Draining:
    """Drain-then-stop; the Reconciler provides replicas, load, the registry and _save."""

    async def drain_and_stop(self, r: Replica, why: str) -> None:
        """Stop ``r`` for ``why`` (the operator's restart), drained first if it answers."""
        await self._stop(r, why)

    async def _stop(self, r: Replica, why: str) -> None:
        if r.state == rs.READY and r.node_id and self.replica_load([r.replica_id]) is not None:
            r.drain_pending = True
            r.move(rs.DRAINING, why, deadline_s=self.scaler.config.drain_timeout_s)
            await self._save(r)
            return
        if r.state in rs.ACTIVE and r.node_id:
            r.drain_pending = False
            r.move(rs.DRAINING, why, deadline_s=STOP_GRACE_S * 3)
            await self._save(r)
            if await self._send_stop(r, why):
                return  # the agent reports "stopped"
        r.drain_pending = False
        r.move(rs.STOPPED, why)
        await self._save(r)

    async def _finish_drains(self) -> None:
        """Send StopShard to each draining replica whose requests have finished (or timed out)."""
        now = utcnow()
        for r in list(self.replicas.values()):
            if r.state != rs.DRAINING or not r.drain_pending:
                continue
            timed_out = r.deadline is not None and r.deadline <= now
            load = self.replica_load([r.replica_id])
            idle = load is None or (load.busy == 0 and load.waiting == 0)
            settled = (now - r.since).total_seconds() >= DRAIN_SETTLE_S
            if not timed_out and not (idle and settled):
                continue
            why = r.reason
            note = (
                "its requests finished; stopping"
                if idle
                else f"requests still running after {self.scaler.config.drain_timeout_s:g} s; "
                "stopping"
            )
            r.drain_pending = False
            r.move(rs.DRAINING, f"{why}; {note}")
            r.deadline = now + timedelta(seconds=STOP_GRACE_S * 3)
            await self._save(r)
            if not await self._send_stop(r, why):
                r.move(rs.STOPPED, why)
                await self._save(r)

    async def _send_stop(self, r: Replica, why: str) -> bool:
        ack = await self._registry.command(
            r.node_id,
            ControlMessage(
                stop_shard=StopShard(shard_id=r.shard_id, reason=why, grace_s=STOP_GRACE_S)
            ),
        )
        return ack.ok
