"""The live view of every node: registration, heartbeats, liveness, overlays.

Heartbeats land here, in memory; the store gets the latest one per node in a
batch every ``heartbeat_flush_interval_s`` — a thousand nodes beating every
second must not mean a thousand writes a second. State changes (ready,
not_ready, cordon) are written through at once: they are rare and matter.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gatewayd.nodes.views import node_view
from gatewayd.nodes.watch import Broadcaster
from gatewayd.store import HeartbeatRow, NodeRecord, Store
from llmgw.aio import within
from llmgw.labels import check_labels
from llmgw.protojson import to_plain
from proto.llmgw.v1 import (
    CommandAck,
    ControlMessage,
    EngineStatus,
    Gpu,
    Heartbeat,
    HostFacts,
    NodeView,
    Register,
    ShardStatus,
    WeightsReport,
)

log = logging.getLogger(__name__)

READY = "ready"
NOT_READY = "not_ready"
REGISTERING = "registering"
GONE = "gone"

# Rows built between two yields to the event loop during a flush.
FLUSH_YIELD_EVERY = 100

# An agent answers a command as soon as it has read it; 30 s is a stream in trouble.
COMMAND_TIMEOUT_S = 30.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def heartbeat_sample(hb: Heartbeat) -> dict:
    """What the store keeps of a heartbeat, built field by field.

    betterproto2's generic to_dict re-reads type hints on every call; at a
    thousand nodes with eight GPUs each it cost half a second per flush.
    """
    return {
        "sent_unix_ms": hb.sent_unix_ms,
        "disk_free_bytes": hb.disk_free_bytes,
        "memory_available_bytes": hb.memory_available_bytes,
        "gpus": [
            {
                "index": g.index,
                "memory_used_bytes": g.memory_used_bytes,
                "memory_foreign_bytes": g.memory_foreign_bytes,
                "utilization_percent": g.utilization_percent,
                "temperature_c": g.temperature_c,
            }
            for g in hb.gpus
        ],
    }


def _own_labels(reg: Register) -> dict[str, str]:
    """The labels a node sends of itself, the ones that are not labels left out (and logged)."""
    out = {}
    for k, v in reg.labels.items():
        try:
            check_labels({k: v})
        except ValueError as e:
            log.warning("node %s: ignored a label it sent: %s", reg.node_id, e)
            continue
        out[k] = v
    return out


@dataclass
class NodeLive:
    """What the control plane knows of one node right now."""

    record: NodeRecord
    connected: bool = False
    # time.monotonic() of the last message from the agent; None until one arrives.
    last_seen_mono: float | None = None
    heartbeat: Heartbeat | None = None
    # The host facts and GPUs as messages, built once per registration.
    host_msg: HostFacts | None = None
    gpus_msg: list[Gpu] = field(default_factory=list)
    # Engine -> its latest EngineStatus from the agent.
    engines: dict[str, EngineStatus] = field(default_factory=dict)
    # What its weights cache held at its latest report, and when that came
    # (kept while it is away, and over a re-registration until the next report).
    weights: WeightsReport | None = None
    weights_at: datetime | None = None
    heartbeat_dirty: bool = False
    session_id: int = 0
    # Set by the agent service to close the stream (e.g. superseded session).
    on_close: Callable[[str], None] | None = field(default=None, repr=False)
    # Set by the agent service: queue a command on this node's stream.
    send: Callable[[ControlMessage], None] | None = field(default=None, repr=False)


def keep_bandwidth(live: NodeLive, gbs: float) -> None:
    """Keep a node's measured memory bandwidth as its figure; 0 (not measured) keeps the last.

    The host facts become a new message rather than one changed in place:
    placement keeps its inventory per host message (controller/candidates.py).
    """
    host = live.host_msg
    if not gbs or host is None or host.mem_bandwidth_gbs == gbs:
        return
    live.host_msg = HostFacts.parse(bytes(host))
    live.host_msg.mem_bandwidth_gbs = gbs
    live.record.host = {**(live.record.host or {}), "mem_bandwidth_gbs": gbs}


class NodeRegistry:
    """Every node, in memory, backed by the store."""

    def __init__(
        self,
        store: Store,
        *,
        not_ready_grace_s: float,
        clock=time.monotonic,
        fence: Callable[[], bool] = lambda: True,
    ):
        self._store = store
        # Whether this control plane leads now: only the leader commands agents.
        self._fence = fence
        self._grace_s = not_ready_grace_s
        self._clock = clock
        self._nodes: dict[str, NodeLive] = {}
        self._sessions = 0
        self._command_ids = itertools.count(1)
        self._acks: dict[str, asyncio.Future[CommandAck]] = {}
        self.watch = Broadcaster()
        # Set by the controller: shard reports from agents (including those a
        # registering agent still runs) go to it.
        # Must not block: it is called from the agent's receive loop, which
        # also carries the acknowledgements the controller may be waiting for.
        self.on_shard_status: Callable[[str, ShardStatus], None] | None = None

    async def load(self, *, leading: bool = True) -> None:
        """Take the nodes from the store; none is connected until its agent dials in.

        The leader marks the nodes it does not hear from yet not ready (their
        agents dial the leader); a standby takes the states as the leader wrote them.
        """
        if not leading:
            await self.refresh()
            return
        for live in self._nodes.values():
            if live.connected and live.on_close is not None:
                live.on_close("the control plane's role changed")
        self._nodes = {}
        for rec in await self._store.list_nodes():
            live = NodeLive(record=rec)
            if rec.state in (READY, REGISTERING):
                reason = "the control plane restarted; waiting for the agent to reconnect"
                rec.state, rec.reason, rec.state_since = NOT_READY, reason, utcnow()
                await self._store.set_node_state(rec.node_id, rec.state, reason, rec.state_since)
            live.last_seen_mono = None
            self._nodes[rec.node_id] = live

    async def refresh(self) -> None:
        """A standby's view: every node as the store has it now (the leader writes them)."""
        nodes: dict[str, NodeLive] = {}
        for rec in await self._store.list_nodes():
            old = self._nodes.get(rec.node_id)
            if old is not None and old.connected:
                nodes[rec.node_id] = old  # never on a standby; kept rather than dropped
                continue
            live = NodeLive(record=rec)
            live.last_seen_mono = None
            nodes[rec.node_id] = live
            if old is None or (
                old.record.state,
                old.record.reason,
                old.record.cordoned,
                old.record.draining,
                old.record.address,
            ) != (rec.state, rec.reason, rec.cordoned, rec.draining, rec.address):
                self.watch.publish("nodes", rec.node_id)
        for gone in self._nodes.keys() - nodes.keys():
            self.watch.publish("nodes", gone)
        self._nodes = nodes

    def close_all(self, reason: str) -> int:
        """End every agent's stream (this control plane stopped leading); how many."""
        closed = 0
        for live in self._nodes.values():
            if live.connected and live.on_close is not None:
                live.on_close(reason)
                closed += 1
        return closed

    # ---- agent side ----------------------------------------------------

    async def register(self, reg: Register, *, address: str) -> int:
        """Accept a node's registration; returns the session id the stream holds."""
        now = utcnow()
        live = self._nodes.get(reg.node_id)
        if live is not None and live.connected and live.on_close is not None:
            # The agent reconnected before its old stream was noticed dead
            # (frozen, then resumed): the newer stream wins.
            live.on_close("superseded by a new connection from the agent")
        prev = live.record if live else None
        prev_live = live
        was = prev.state if prev else None
        rec = NodeRecord(
            node_id=reg.node_id,
            hostname=reg.hostname,
            version=reg.version,
            address=address,
            state=READY,
            reason=self._ready_reason(prev, now),
            state_since=now,
            cordoned=prev.cordoned if prev else False,
            draining=prev.draining if prev else False,
            host=to_plain(reg.host) if reg.host else {},
            gpus=[to_plain(g) for g in reg.gpus],
            installable_engines=list(reg.installable_engines),
            labels=_own_labels(reg),
            operator_labels=prev.operator_labels if prev else {},
            registered_at=now,
            last_heartbeat_at=now,
            heartbeat_seq=0,
        )
        await self._store.upsert_node(rec)
        self._sessions += 1
        live = NodeLive(record=rec, connected=True, last_seen_mono=self._clock())
        live.host_msg, live.gpus_msg = reg.host or HostFacts(), list(reg.gpus)
        if prev is not None and not live.host_msg.mem_bandwidth_gbs:
            # A restarted agent measures again after registering; until its
            # figure comes, the last one stands.
            keep_bandwidth(live, float((prev.host or {}).get("mem_bandwidth_gbs") or 0.0))
        live.session_id = self._sessions
        if prev_live is not None:
            live.weights, live.weights_at = prev_live.weights, prev_live.weights_at
        self._nodes[reg.node_id] = live
        log.info("node %s registered from %s (was %s)", reg.node_id, address, was or "new")
        self.watch.publish("nodes", reg.node_id)
        for shard in reg.shards:
            await self.shard_status(reg.node_id, live.session_id, shard)
        return live.session_id

    async def shard_status(self, node_id: str, session_id: int, status: ShardStatus) -> None:
        live = self._nodes.get(node_id)
        if live is None or live.session_id != session_id:
            return
        if self.on_shard_status is not None:
            self.on_shard_status(node_id, status)

    def weights_report(self, node_id: str, session_id: int, report: WeightsReport) -> None:
        """What a node's weights cache holds now (``llmgw ctl weights``)."""
        live = self._nodes.get(node_id)
        if live is None or live.session_id != session_id:
            return
        live.weights, live.weights_at = report, utcnow()
        for evicted in report.evicted:
            log.info("node %s removed %s from its weights cache (over its limit)", node_id, evicted)

    def engine_status(self, node_id: str, session_id: int, status: EngineStatus) -> None:
        live = self._nodes.get(node_id)
        if live is None or live.session_id != session_id:
            return
        live.engines[status.engine] = status
        self.watch.publish("engines", node_id)

    def set_grace(self, not_ready_grace_s: float) -> None:
        """How long a node may stay silent before it is not ready, from the next check on."""
        self._grace_s = not_ready_grace_s

    def live(self, node_id: str) -> NodeLive | None:
        return self._nodes.get(node_id)

    def live_nodes(self) -> list[NodeLive]:
        """Every node's live state, for the controller (read, never modify)."""
        return [self._nodes[n] for n in sorted(self._nodes)]

    @staticmethod
    def _ready_reason(prev: NodeRecord | None, now: datetime) -> str:
        if prev is None:
            return "registered"
        if prev.state == NOT_READY:
            away_s = int((now - prev.state_since).total_seconds())
            return f"back after {away_s} s not ready ({prev.reason})"
        return "re-registered"

    async def heartbeat(self, node_id: str, session_id: int, hb: Heartbeat) -> None:
        """A heartbeat: memory only; written to the store by ``flush``."""
        live = self._nodes.get(node_id)
        if live is None or live.session_id != session_id:
            return
        live.last_seen_mono = self._clock()
        live.heartbeat = hb
        live.heartbeat_dirty = True
        live.record.heartbeat_seq = hb.seq
        live.record.last_heartbeat_at = utcnow()
        if hb.mem_bandwidth_gbs:
            keep_bandwidth(live, hb.mem_bandwidth_gbs)
        if live.record.state == NOT_READY:
            # Heartbeats resumed on the same stream (the agent was frozen, not cut).
            await self._set_state(live, READY, self._ready_reason(live.record, utcnow()))
        else:
            self.watch.publish("nodes", node_id)

    async def disconnected(self, node_id: str, session_id: int, why: str) -> None:
        live = self._nodes.get(node_id)
        if live is None or live.session_id != session_id:
            return  # an older, superseded stream ending
        live.connected = False
        live.on_close = live.send = None
        if live.record.state != GONE:
            await self._set_state(live, NOT_READY, f"agent disconnected: {why}")

    # ---- liveness and persistence -------------------------------------

    async def check_liveness(self) -> None:
        """Mark nodes that stopped heartbeating not_ready (they keep their replicas)."""
        now = self._clock()
        for live in list(self._nodes.values()):
            if live.record.state != READY or live.last_seen_mono is None:
                continue
            silent_s = now - live.last_seen_mono
            if silent_s >= self._grace_s:
                await self._set_state(
                    live,
                    NOT_READY,
                    f"no heartbeat for {int(silent_s)} s (grace {self._grace_s:g} s)",
                )

    async def flush(self) -> int:
        """Write the latest heartbeat of every node that beat since the last flush."""
        rows = []
        for i, live in enumerate(self._nodes.values()):
            if live.heartbeat_dirty and live.heartbeat is not None:
                live.heartbeat_dirty = False
                rows.append(
                    HeartbeatRow(
                        node_id=live.record.node_id,
                        at=live.record.last_heartbeat_at or utcnow(),
                        seq=live.heartbeat.seq,
                        sample=heartbeat_sample(live.heartbeat),
                    )
                )
            if i % FLUSH_YIELD_EVERY == FLUSH_YIELD_EVERY - 1:
                # Let heartbeats and admin calls in: a thousand nodes' rows
                # built in one go held the loop for half a second.
                await asyncio.sleep(0)
        if rows and self._fence():
            await self._store.record_heartbeats(rows)
        return len(rows)

    async def _set_state(self, live: NodeLive, state: str, reason: str) -> None:
        rec = live.record
        if rec.state == state and rec.reason == reason:
            return
        log.info("node %s: %s -> %s (%s)", rec.node_id, rec.state, state, reason)
        rec.state, rec.reason, rec.state_since = state, reason, utcnow()
        # Watchers hear of it first: memory is the truth the admin API answers
        # from, and a cancelled store write must not swallow the notice.
        self.watch.publish("nodes", rec.node_id)
        if not self._fence():
            return  # a control plane that no longer leads: the leader writes nodes' states
        await self._store.set_node_state(rec.node_id, state, reason, rec.state_since)

    # ---- operator side -------------------------------------------------

    async def set_draining(self, node_id: str, draining: bool) -> NodeView | None:
        live = self._nodes.get(node_id)
        if live is None:
            return None
        await self._store.set_node_draining(node_id, draining)
        live.record.draining = draining
        self.watch.publish("nodes", node_id)
        return self.view(node_id)

    async def set_cordoned(self, node_id: str, cordoned: bool) -> NodeView | None:
        live = self._nodes.get(node_id)
        if live is None:
            return None
        await self._store.set_node_cordoned(node_id, cordoned)
        live.record.cordoned = cordoned
        self.watch.publish("nodes", node_id)
        return self.view(node_id)

    async def set_labels(self, node_id: str, labels: dict[str, str]) -> NodeView | None:
        """Replace the operator's labels of a node (the node's own are its agent.yaml's)."""
        live = self._nodes.get(node_id)
        if live is None:
            return None
        await self._store.set_node_labels(node_id, labels)
        # A new dict, never changed in place: the controller compares the
        # one it last saw with the current one to notice a change.
        live.record.operator_labels = dict(labels)
        self.watch.publish("nodes", node_id)
        return self.view(node_id)

    def view(self, node_id: str) -> NodeView | None:
        live = self._nodes.get(node_id)
        if live is None:
            return None
        if live.host_msg is None:  # loaded from the store: built on first use
            rec = live.record
            live.host_msg = HostFacts.from_dict(rec.host) if rec.host else HostFacts()
            live.gpus_msg = [Gpu.from_dict(g) for g in rec.gpus]
        return node_view(live)

    def views(self) -> list[NodeView]:
        return [self.view(n) for n in sorted(self._nodes)]  # type: ignore[misc]

    def bind_session(
        self,
        node_id: str,
        session_id: int,
        on_close: Callable[[str], None],
        send: Callable[[ControlMessage], None],
    ) -> None:
        live = self._nodes.get(node_id)
        if live is not None and live.session_id == session_id:
            live.on_close, live.send = on_close, send

    # ---- commands to agents ---------------------------------------------

    async def command(
        self, node_id: str, msg: ControlMessage, *, timeout_s: float = COMMAND_TIMEOUT_S
    ) -> CommandAck:
        """Send one command down a node's stream and wait for the agent's acknowledgement.

        A node that is not connected, or does not answer in time, gets an
        unsuccessful CommandAck saying so: the caller decides what follows.
        """
        if not self._fence():
            return CommandAck(ok=False, error="this control plane does not lead now")
        live = self._nodes.get(node_id)
        if live is None or not live.connected or live.send is None:
            return CommandAck(ok=False, error=f"node {node_id} is not connected")
        msg.command_id = f"{node_id}-{next(self._command_ids)}"
        answer: asyncio.Future[CommandAck] = asyncio.get_running_loop().create_future()
        self._acks[msg.command_id] = answer
        try:
            live.send(msg)
            return await within(answer, timeout_s)
        except TimeoutError:
            return CommandAck(
                command_id=msg.command_id,
                ok=False,
                error=f"node {node_id} did not answer within {timeout_s:g} s",
            )
        finally:
            self._acks.pop(msg.command_id, None)

    def acked(self, ack: CommandAck) -> None:
        answer = self._acks.get(ack.command_id)
        if answer is not None and not answer.done():
            answer.set_result(ack)

    def counts(self) -> dict[str, int]:
        out = {READY: 0, NOT_READY: 0}
        for live in self._nodes.values():
            out[live.record.state] = out.get(live.record.state, 0) + 1
        return out
