"""What the cluster looks like at a glance: counts, GPUs, request rates, warnings.

A plain object the console keeps current from the admin replies (the same
ones ``llmgw ctl status``, ``nodes``, ``models``, ``replicas``, ``engines``
and ``warnings`` print) and from ``Watch`` events; the header and the
Overview draw from it. No I/O here: what it holds comes in through ``load``,
``apply`` and ``sample``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from llmgw.present.clusterfmt import header_line
from llmgw.present.modelfmt import HOLDING
from proto.llmgw.v1 import (
    EngineView,
    ModelView,
    NodeView,
    ReplicaView,
    StatusReply,
    WarningView,
    WatchEvent,
)

# Requests per second are measured over the samples of about the last minute.
RATE_WINDOW_S = 60.0


@dataclass
class GpuUse:
    """One card: its size, what the node last measured in use, and the replicas on it."""

    node_id: str
    index: int
    name: str
    memory_total_bytes: int
    memory_used_bytes: int = 0
    replicas: list[ReplicaView] = field(default_factory=list)


@dataclass
class Rates:
    requests_per_s: float
    errors_per_s: float


@dataclass
class ClusterSummary:
    status: StatusReply | None = None
    nodes: dict[str, NodeView] = field(default_factory=dict)
    models: dict[str, ModelView] = field(default_factory=dict)
    replicas: dict[str, ReplicaView] = field(default_factory=dict)
    engines: list[EngineView] = field(default_factory=list)
    warnings: list[WarningView] = field(default_factory=list)
    # (monotonic seconds, requests_total, errors_total) from successive Status replies.
    samples: deque[tuple[float, int, int]] = field(default_factory=lambda: deque(maxlen=64))
    loaded: bool = False
    # gpus() as last worked out; None once nodes or replicas changed.
    _gpus: list[GpuUse] | None = field(default=None, repr=False)

    # -- what comes in ------------------------------------------------------------

    def load(
        self,
        status: StatusReply,
        nodes: list[NodeView],
        models: list[ModelView],
        replicas: list[ReplicaView],
        engines: list[EngineView],
        warnings: list[WarningView],
        *,
        now: float,
    ) -> None:
        """Everything at once (the first read, and again after a cut watch)."""
        self.nodes = {n.node_id: n for n in nodes}
        self.models = {m.spec.name: m for m in models if m.spec}
        self.replicas = {r.replica_id: r for r in replicas}
        self.engines = list(engines)
        self.warnings = list(warnings)
        self.sample(status, now=now)
        self.loaded = True
        self._gpus = None

    def apply(self, event: WatchEvent) -> bool:
        """One watch event; returns whether it changed anything counted here."""
        if event.topic in ("nodes", "replicas"):
            self._gpus = None
        if event.topic == "nodes":
            return _put(self.nodes, event.key, event.node)
        if event.topic == "models":
            return _put(self.models, event.key, event.model)
        if event.topic == "replicas":
            return _put(self.replicas, event.key, event.replica)
        return False

    def sample(self, status: StatusReply, *, now: float) -> None:
        """A Status reply: the cluster's name and the gateway's counters at ``now``."""
        if self.samples and status.requests_total < self.samples[-1][1]:
            self.samples.clear()  # gatewayd restarted: its counters began again
        self.status = status
        self.samples.append((now, status.requests_total, status.errors_total))

    # -- what is drawn ------------------------------------------------------------

    @property
    def cluster_name(self) -> str:
        return self.status.cluster_name if self.status else ""

    def nodes_ready(self) -> tuple[int, int]:
        return sum(1 for n in self.nodes.values() if n.state == "ready"), len(self.nodes)

    def models_serving(self) -> tuple[int, int]:
        models = self.models.values()
        return sum(1 for m in models if m.state == "serving"), len(models)

    def replicas_ready(self) -> tuple[int, int]:
        """Ready replicas and those wanted, over every model (as ``ctl models`` counts)."""
        models = self.models.values()
        return sum(m.replicas_ready for m in models), sum(m.replicas_desired for m in models)

    def gpus(self) -> list[GpuUse]:
        """Every card of every node, with its measured memory and the replicas on it.

        Worked out once per change: the Overview asks several times a draw."""
        if self._gpus is None:
            self._gpus = self._work_out_gpus()
        return self._gpus

    def _work_out_gpus(self) -> list[GpuUse]:
        cards: dict[tuple[str, int], GpuUse] = {}
        for n in self.nodes.values():
            used = {s.index: s.memory_used_bytes for s in n.gpu_samples}
            for g in n.gpus:
                cards[(n.node_id, g.index)] = GpuUse(
                    n.node_id, g.index, g.name, g.memory_total_bytes, used.get(g.index, 0)
                )
        for r in self.replicas.values():
            if r.state not in HOLDING:
                continue
            for index in r.gpu_indexes:
                card = cards.get((r.node_id, index))
                if card is not None:
                    card.replicas.append(r)
        return list(cards.values())

    def gpus_in_use(self) -> tuple[int, int]:
        """Cards holding a replica, and all cards."""
        cards = self.gpus()
        return sum(1 for c in cards if c.replicas), len(cards)

    def rates(self) -> Rates | None:
        """Requests and errors per second over about the last minute; None until two samples."""
        if len(self.samples) < 2:
            return None
        newest = self.samples[-1]
        oldest = next(s for s in self.samples if newest[0] - s[0] <= RATE_WINDOW_S)
        if oldest is newest:
            oldest = self.samples[-2]
        span_s = newest[0] - oldest[0]
        if span_s <= 0:
            return None
        return Rates(
            requests_per_s=(newest[1] - oldest[1]) / span_s,
            errors_per_s=(newest[2] - oldest[2]) / span_s,
        )

    def state_line(self) -> str:
        """The cluster's state in a few words, for the header: "3/3 nodes ready · …"."""
        if not self.loaded:
            return "reading the cluster…"
        ready, total = self.nodes_ready()
        serving, models = self.models_serving()
        line = f"{ready}/{total} nodes ready · {serving}/{models} models serving"
        # Several control planes, or a store in trouble: which one leads, and the store.
        planes = header_line(self.status)
        return f"{line} · {planes}" if planes else line


def _put(table: dict, key: str, value) -> bool:
    if value is None:
        return table.pop(key, None) is not None
    table[key] = value
    return True
