"""Rotating the replicas' engine keys without an answer lost (``ctl engines rotate-key``).

For every replica a start was sent for, in three steps:

1. its node's door is told to take the old key and the new one (ShardKeys);
2. its record moves to the next key epoch, so the leader's gateway sends the
   new key at once and every standby's from its next read of the replicas
   (each second, ``GatewayServer._follow``);
3. after ``grace_s`` — long enough for every control plane to have read the
   records — the door is told to take the new key alone: the old one is
   refused from then on.

A request is checked at the door when its head arrives; answers already
streaming are not touched by any of it. A replica whose node does not answer
keeps its key, and is named in the reply with why.
"""

from __future__ import annotations

import asyncio
import logging

from gatewayd.controller import replica as rs
from proto.llmgw.v1 import ControlMessage, RotateEngineKeysReply, ShardKeys

log = logging.getLogger(__name__)

# Standbys read the replicas each second; three of those, and the store's own time.
GRACE_S = 3.0
# A start was sent for these: the node holds (or is opening) the shard's door.
SENT = (rs.PLACED, rs.FETCHING, rs.INSTALLING, rs.STARTING, rs.READY, rs.DRAINING)


async def rotate_engine_keys(reconciler, *, grace_s: float = GRACE_S) -> RotateEngineKeysReply:
    """Move every started replica to a new key; the leader's reconciler does it."""
    access = reconciler.access
    registry = reconciler.registry
    reply = RotateEngineKeysReply()
    if access is None or not access.secret:
        reply.skipped.append("no engine secret on this control plane: replicas take no key")
        return reply
    moving = []
    for r in sorted(reconciler.replicas.values(), key=lambda r: r.replica_id):
        if r.state not in SENT or not r.node_id:
            continue
        old = access.key(r.replica_id, r.restarts, r.key_epoch)
        new = access.key(r.replica_id, r.restarts, r.key_epoch + 1)
        ack = await registry.command(
            r.node_id, ControlMessage(shard_keys=ShardKeys(shard_id=r.shard_id, keys=[old, new]))
        )
        if not ack.ok:
            reply.skipped.append(f"{r.replica_id}: {ack.error}")
            continue
        r.key_epoch += 1
        await reconciler.save(r)
        moving.append((r, new))
    if moving:
        await asyncio.sleep(grace_s)
    for r, new in moving:
        ack = await registry.command(
            r.node_id, ControlMessage(shard_keys=ShardKeys(shard_id=r.shard_id, keys=[new]))
        )
        if ack.ok:
            reply.rotated.append(r.replica_id)
        else:
            # Its door still takes the old key beside the new: said, and tried at the next rotation.
            reply.skipped.append(f"{r.replica_id}: the old key is still taken: {ack.error}")
    reply.epoch = max((r.key_epoch for r in reconciler.replicas.values()), default=0)
    log.info("engine keys rotated: %d replicas, %d left as they were", len(reply.rotated),
             len(reply.skipped))  # fmt: skip
    return reply
