"""Admin RPCs for the nodes' weights caches (llmgw ctl weights …, the console's Weights dialog).

``ListWeights`` answers from each node's latest WeightsReport (kept by the
registry as it arrives; a node away shows its last one). ``RemoveWeights``
sends the node a RemoveWeights command and answers with what it removed and
what it kept. Weights a replica uses are never removed: the node refuses those
its shards run on, and before anything is sent the control plane refuses those
that a replica it knows on the node uses (by the replica's model name, or the
repository at the commit its model pins) — so a node that has not reported
yet, or a replica placed there and not started yet, loses nothing it needs.
"""

from __future__ import annotations

import logging
from datetime import datetime

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.catalog.catalog import Catalog
from gatewayd.controller.reconciler import Reconciler
from gatewayd.controller.replica import ACTIVE as ACTIVE_REPLICA
from gatewayd.nodes.registry import GONE, NodeLive, NodeRegistry
from gatewayd.nodes.weights import repo_key
from llmgw.present.weightsfmt import weights_key
from proto.llmgw.v1 import (
    ControlMessage,
    ListWeightsReply,
    ListWeightsRequest,
    NodeWeights,
    RemoveWeights,
    RemoveWeightsReply,
    RemoveWeightsRequest,
    WeightsReport,
)

log = logging.getLogger(__name__)

# The node answers once its entries are renamed away (their files are deleted after).
REMOVE_TIMEOUT_S = 30.0


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


def covers(name: str, key: str) -> bool:
    """Whether removing ``name`` would remove the entry ``key`` (a key names what is under it)."""
    return key == name or key.startswith(f"{name}/")


def parse_lines(lines: list[str]) -> tuple[list[str], list[str], int]:
    """The node's answer ("removed KEY BYTES", "kept KEY: why"): removed, kept, bytes freed."""
    removed, kept, freed = [], [], 0
    for line in lines:
        verb, _, rest = line.partition(" ")
        if verb == "removed":
            key, _, size = rest.rpartition(" ")
            removed.append(key or size)
            freed += int(size) if size.isdigit() else 0
        elif verb == "kept":
            kept.append(rest)
    return removed, kept, freed


class WeightsAdmin:
    """Mixed into AdminService."""

    _registry: NodeRegistry
    _reconciler: Reconciler
    _catalog: Catalog

    def _weights_node(self, node_id: str) -> NodeLive:
        live = self._registry.live(node_id)
        if live is None or live.record.state == GONE:
            raise GRPCError(Status.NOT_FOUND, f"no node named {node_id!r}; see: llmgw ctl nodes")
        return live

    async def list_weights(self, message: ListWeightsRequest) -> ListWeightsReply:
        if message.node_id:
            nodes = [self._weights_node(message.node_id)]
        else:
            nodes = [n for n in self._registry.live_nodes() if n.record.state != GONE]
        return ListWeightsReply(
            nodes=[
                NodeWeights(
                    node_id=n.record.node_id,
                    report=n.weights or WeightsReport(),
                    reported_at=_iso(n.weights_at),
                    connected=n.connected,
                )
                for n in nodes
            ]
        )

    def _held_by_replicas(self, node_id: str) -> dict[str, list[str]]:
        """Cache key -> the replicas the control plane knows on ``node_id`` that use it."""
        held: dict[str, list[str]] = {}
        for r in self._reconciler.replicas.values():
            if r.node_id != node_id or r.state not in ACTIVE_REPLICA:
                continue
            keys = {r.model}
            model = self._catalog.get(r.model)
            if model is not None and (key := repo_key(model)):
                keys.add(key)
            for key in keys:
                held.setdefault(key, []).append(r.replica_id)
        return held

    async def remove_weights(self, message: RemoveWeightsRequest) -> RemoveWeightsReply:
        node_id = message.node_id
        live = self._weights_node(node_id)
        names = [weights_key(k) for k in message.keys if weights_key(k)]
        if not names and not message.unused:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"name the weights to remove (their keys, as `llmgw ctl weights {node_id}` "
                "lists them), or ask for every entry no replica uses (--unused)",
            )
        if not live.connected:
            raise GRPCError(
                Status.UNAVAILABLE,
                f"node {node_id} is not connected: its weights can be removed only while its "
                "agent is; see: llmgw ctl nodes",
            )
        held = self._held_by_replicas(node_id)
        kept: list[str] = []
        send: list[str] = []
        for name in dict.fromkeys(names):
            users = sorted({r for key, rs in held.items() if covers(name, key) for r in rs})
            if users:
                kept.append(f"{name}: in use by replica {', '.join(users)}")
            else:
                send.append(name)
        if message.unused:
            if live.weights is None:
                raise GRPCError(
                    Status.FAILED_PRECONDITION,
                    f"node {node_id} has not said what its weights cache holds yet; name the "
                    f"entries to remove, or try again once `llmgw ctl weights {node_id}` lists them",
                )
            # Every entry of its report no shard there uses and no replica known here uses:
            # named one by one, so the node removes nothing the control plane did not check.
            for e in live.weights.entries:
                if any(covers(name, e.key) for name in send):
                    continue
                users = {r for key, rs in held.items() if covers(e.key, key) for r in rs}
                users = sorted(users | set(e.used_by))
                if users:
                    kept.append(f"{e.key}: in use by replica {', '.join(users)}")
                else:
                    send.append(e.key)
        removed: list[str] = []
        freed = 0
        if send:
            ack = await self._registry.command(
                node_id,
                ControlMessage(remove_weights=RemoveWeights(keys=send, unused=False)),
                timeout_s=REMOVE_TIMEOUT_S,
            )
            if not ack.ok:
                raise GRPCError(
                    Status.UNAVAILABLE, f"node {node_id} did not remove weights: {ack.error}"
                )
            removed, theirs, freed = parse_lines(list(ack.lines))
            kept += theirs
        if removed:
            log.info("node %s: removed weights %s on request", node_id, ", ".join(removed))
        return RemoveWeightsReply(node_id=node_id, removed=removed, kept=kept, freed_bytes=freed)
