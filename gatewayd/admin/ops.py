"""Admin RPCs that operate on the cluster: remove a node, restart a replica, list warnings.

``RemoveNode`` leaves a tombstone: the node's state becomes "gone" (the last
state of ARCHITECTURE.md §5), its cordon and drain are cleared, and every
list and watch leaves it out. An agent that connects again registers as if
it were new. ``RestartReplica`` stops a running replica the way a scale-down
does, so the reconciler starts another in its place; a failed or unplaced
one is tried again at once instead of after its backoff. ``Warnings`` is
what is wrong now and what went wrong in the period asked for, each with
what to do about it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.admin.views import replica_view
from gatewayd.catalog.catalog import Catalog
from gatewayd.controller import replica as rs
from gatewayd.controller.reconciler import Reconciler
from gatewayd.controller.replica import Replica, utcnow
from gatewayd.nodes.registry import GONE, NOT_READY, READY, NodeLive, NodeRegistry
from gatewayd.store import ReplicaRecord, Store
from llmgw.present.opsfmt import host_warnings
from proto.llmgw.v1 import (
    HostFacts,
    RemoveNodeReply,
    RemoveNodeRequest,
    RestartReplicaReply,
    RestartReplicaRequest,
    WarningsReply,
    WarningsRequest,
    WarningView,
)

log = logging.getLogger(__name__)

# What "warnings" means without a period: the last hour, as on the node console.
WARNINGS_DEFAULT_S = 3600
RESTART_REASON = "restarted by the operator"


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


def _active_on(replicas: Iterable[Replica], node_id: str) -> list[Replica]:
    return [r for r in replicas if r.node_id == node_id and r.state in rs.ACTIVE]


class OpsAdmin:
    """Mixed into AdminService."""

    _registry: NodeRegistry
    _catalog: Catalog
    _reconciler: Reconciler
    _store: Store

    # ---- RemoveNode ----------------------------------------------------------

    async def remove_node(self, message: RemoveNodeRequest) -> RemoveNodeReply:
        node_id = message.node_id
        live = self._registry.live(node_id)
        if live is None or live.record.state == GONE:
            raise GRPCError(Status.NOT_FOUND, f"no node named {node_id!r}; see: llmgw ctl nodes")
        rec = live.record
        left = _active_on(self._reconciler.replicas.values(), node_id)
        if left:
            ids = ", ".join(r.replica_id for r in left[:3]) + (" …" if len(left) > 3 else "")
            first = (
                "wait until they have moved (llmgw ctl replicas)"
                if rec.draining
                else f"drain it first: llmgw ctl drain {node_id}"
            )
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                f"{node_id} still runs {len(left)} replica{'s' if len(left) != 1 else ''}"
                f" ({ids}); {first}, then remove it",
            )
        if live.connected and not rec.draining:
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                f"{node_id} is connected and {rec.state.replace('_', ' ')}; drain it first"
                f" (llmgw ctl drain {node_id}), or stop its agent on that machine"
                " (systemctl stop llmgw-agent), then remove it",
            )
        was_connected = live.connected
        # Gone in memory first: every watcher told of what follows hears it as gone.
        now = utcnow()
        rec.state, rec.reason, rec.state_since = GONE, "removed by the operator", now
        # Forgotten: a machine that comes back later starts with no cordon,
        # drain or operator labels.
        await self._registry.set_cordoned(node_id, False)
        await self._registry.set_draining(node_id, False)
        await self._registry.set_labels(node_id, {})
        await self._store.set_node_state(node_id, GONE, rec.reason, now)
        live.engines.clear()  # ctl engines no longer lists it
        # A connected agent's stream is left open: closing it from here ends
        # the agent (its session does not expect the control plane to end
        # the stream). Its heartbeats are ignored from now on, and its next
        # connection registers it as a new node.
        self._registry.watch.publish("nodes", node_id)
        self._reconciler.kick()
        log.info("node %s removed by the operator (connected: %s)", node_id, was_connected)
        note = (
            "its agent is still connected: stop it on that machine (systemctl stop"
            " llmgw-agent), or it comes back as a new node when it next connects"
            if was_connected
            else "if its agent connects again, it registers as a new node"
        )
        return RemoveNodeReply(
            node_id=node_id, removed=True, was_connected=was_connected, note=note
        )

    # ---- RestartReplica ------------------------------------------------------

    async def restart_replica(self, message: RestartReplicaRequest) -> RestartReplicaReply:
        r = self._reconciler.replicas.get(message.replica_id)
        if r is None:
            raise GRPCError(
                Status.NOT_FOUND, f"no replica {message.replica_id!r}; see: llmgw ctl replicas"
            )
        if r.state in (rs.DRAINING, rs.STOPPED):
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                f"{r.replica_id} is {r.state} already ({r.reason}); the reconciler keeps"
                f" {r.model} at its replica count: see llmgw ctl replicas --model {r.model}",
            )
        model = self._catalog.get(r.model)
        if model is None:
            raise GRPCError(
                Status.FAILED_PRECONDITION, f"{r.model} was removed; its replicas are stopping"
            )
        if r.state in (rs.FAILED, rs.PENDING):
            # Waiting out a backoff or a placement retry: try again in the next pass.
            r.retry_at = utcnow()
            r.move(r.state, f"{RESTART_REASON}; trying again now")
            action = "retry"
            note = f"{r.replica_id} is tried again now: follow it with llmgw ctl replicas"
        else:
            # Drained as a scale-down drains one: its answers finish and nothing new
            # reaches it. It no longer counts toward the model's replicas, so the
            # reconciler's next pass starts another (in its room, once it has
            # stopped, where the cluster has no other).
            await self._reconciler.drain_and_stop(r, RESTART_REASON)
            action = "replace"
            note = (
                f"{r.replica_id} finishes what it answers and stops; a new replica of {r.model}"
                f" takes its place: follow it with llmgw ctl replicas --model {r.model}"
            )
        await self._save_replica(r)
        self._reconciler.kick()
        live = self._registry.live(r.node_id) if r.node_id else None
        view = replica_view(r, live.record.address if live else "")
        return RestartReplicaReply(replica=view, action=action, note=note)

    async def _save_replica(self, r: Replica) -> None:
        # As the reconciler saves one: the store, then every watcher of it and its model.
        await self._store.put_replica(
            ReplicaRecord(
                replica_id=r.replica_id,
                model=r.model,
                doc=r.model_dump(mode="json"),
                updated_at=utcnow(),
            )
        )
        self._registry.watch.publish("replicas", r.replica_id)
        self._registry.watch.publish("models", r.model)

    # ---- Warnings ------------------------------------------------------------

    async def warnings(self, message: WarningsRequest) -> WarningsReply:
        if message.since_s < 0:
            raise GRPCError(Status.INVALID_ARGUMENT, "since_s must be 0 (the last hour) or more")
        since = utcnow() - timedelta(seconds=message.since_s or WARNINGS_DEFAULT_S)
        found = cluster_warnings(
            self._registry.live_nodes(), self._reconciler.replicas.values(), since
        )
        # The scaler's changes, newest first, after what is wrong now.
        found += [
            WarningView(
                at=_iso(c.at),
                severity="info",
                kind="scale",
                subject=c.model,
                message=f"{c.before} → {c.after} replicas: {c.reason}",
                hint=f"its bounds: llmgw ctl model scale {c.model} --min N --max M; "
                "the thresholds: llmgw ctl config get scaling",
                current=False,
            )
            for c in reversed(self._reconciler.scaler.changes)
            if c.at >= since
        ]
        return WarningsReply(warnings=found, since=_iso(since))


def cluster_warnings(
    nodes: Iterable[NodeLive], replicas: Iterable[Replica], since: datetime
) -> list[WarningView]:
    """What is wrong now, and what went wrong since ``since``: newest first, current ones first."""
    out: list[WarningView] = []
    for live in nodes:
        out += _node_warnings(live)
    for r in replicas:
        out += _replica_warnings(r, since)
    # Current problems first, errors before warnings, then the newest first.
    out.sort(key=lambda w: w.at, reverse=True)
    out.sort(key=lambda w: (not w.current, w.severity != "error"))
    return out


def _node_warnings(live: NodeLive) -> list[WarningView]:
    rec = live.record
    node_id = rec.node_id
    if rec.state == GONE:
        return []
    out = []
    if rec.state == NOT_READY:
        out.append(
            WarningView(
                at=_iso(rec.state_since),
                severity="error",
                kind="node",
                subject=node_id,
                message=f"not ready: {rec.reason}",
                hint="look at its agent there (journalctl -u llmgw-agent); if the machine is"
                f" gone for good: llmgw ctl drain {node_id}, then llmgw ctl node rm {node_id}",
                current=True,
            )
        )
    host = live.host_msg or (HostFacts.from_dict(rec.host) if rec.host else None)
    for text in host_warnings(host):
        out.append(
            WarningView(
                at=_iso(rec.registered_at),
                severity="warning",
                kind="host",
                subject=node_id,
                message=text,
                hint=f"the node's own words; its facts: llmgw ctl node show {node_id}",
                current=True,
            )
        )
    if rec.state == READY:
        for name in sorted(live.engines):
            st = live.engines[name]
            if st.state != "failed":
                continue
            out.append(
                WarningView(
                    at=_iso(rec.last_heartbeat_at or rec.registered_at),
                    severity="error",
                    kind="engine",
                    subject=node_id,
                    message=f"{name} {st.version} failed to install: {st.message}",
                    hint="fix what it says on the node; it is installed again when the agent"
                    " reconnects (llmgw ctl engines shows every node's)",
                    current=True,
                )
            )
    return out


def _replica_warnings(r: Replica, since: datetime) -> list[WarningView]:
    out = []
    if r.state == rs.FAILED:
        out.append(
            WarningView(
                at=_iso(r.since),
                severity="error",
                kind="replica",
                subject=r.replica_id,
                message=f"{r.model}: failed: {r.reason}",
                hint=f"its engine's last lines: llmgw ctl logs {r.replica_id}; try again now:"
                f" llmgw ctl replica restart {r.replica_id}",
                current=True,
            )
        )
    elif r.state == rs.PENDING and r.retry_at is not None:
        # Placement was tried and refused (a new replica is pending for a moment).
        out.append(
            WarningView(
                at=_iso(r.since),
                severity="warning",
                kind="replica",
                subject=r.replica_id,
                message=f"{r.model}: cannot be placed: {r.reason}",
                hint=f"every node's reason: llmgw ctl explain-placement {r.model}",
                current=True,
            )
        )
    # Failures that passed: the replica restarted since, but it happened.
    current = r.history[-1] if r.state == rs.FAILED and r.history else None
    for before, event in zip([None, *r.history], r.history, strict=False):
        if event.state != rs.FAILED or event.at < since or event is current:
            continue
        if before is not None and before.state == rs.STOPPED:
            # A replica stopped on request whose node reports the stop a second
            # time reads as failed for a moment; nothing failed.
            continue
        out.append(
            WarningView(
                at=_iso(event.at),
                severity="warning",
                kind="replica",
                subject=r.replica_id,
                message=f"{r.model}: failed: {event.reason}",
                hint=f"its history: llmgw ctl replicas --model {r.model}",
                current=False,
            )
        )
    return out
