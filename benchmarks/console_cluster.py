"""The fake cluster the console benchmark streams from (``benchmarks/console.py``).

A real grpclib admin server with gatewayd's token check, holding N nodes
(mixed 0/1/4/8-GPU), M models and a replica each, and streaming changes to
every open ``Watch`` — each stream keeping only the latest change of each key
not yet sent, as gatewayd's does.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

from grpclib.const import Status
from grpclib.events import RecvRequest, listen
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from proto.llmgw.v1 import (
    AdminServiceBase,
    GetModelRequest,
    GetNodeRequest,
    Gpu,
    HostFacts,
    ListEnginesReply,
    ListEnginesRequest,
    ListKeysReply,
    ListKeysRequest,
    ListModelsReply,
    ListModelsRequest,
    ListNodesReply,
    ListNodesRequest,
    ListReplicasReply,
    ListReplicasRequest,
    ListTenantsReply,
    ListTenantsRequest,
    ModelProfile,
    ModelSpec,
    ModelView,
    NodeView,
    ReplicaView,
    StatusReply,
    StatusRequest,
    UsageReply,
    UsageRequest,
    WarningsReply,
    WarningsRequest,
    WatchEvent,
    WatchRequest,
)

GIB = 2**30


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


# -- the fake control plane ------------------------------------------------------------


class FakeCluster(AdminServiceBase):
    """N nodes, M models with a replica each, answered as gatewayd would; ``churn``
    changes them at a steady rate and tells every open Watch."""

    def __init__(self, nodes: int, models: int) -> None:
        rng = random.Random(7)
        self.nodes = {}
        for i in range(nodes):
            gpus = rng.choice((0, 1, 4, 8))
            node_id = f"node-{i:04d}"
            self.nodes[node_id] = NodeView(
                node_id=node_id,
                hostname=f"{node_id}.lab",
                state="ready",
                version="0.1.0",
                address=f"10.{i // 250}.{i % 250}.1",
                last_heartbeat_at=_now(),
                host=HostFacts(
                    hostname=f"{node_id}.lab",
                    os_id="ubuntu",
                    os_version_id="22.04",
                    arch="x86_64",
                    cpu_count=64,
                    memory_total_bytes=512 * GIB,
                    gpu_note="" if gpus else "no NVIDIA driver",
                ),
                gpus=[
                    Gpu(index=g, name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB)
                    for g in range(gpus)
                ],
            )
        node_ids = list(self.nodes)
        self.models, self.replicas = {}, {}
        for i in range(models):
            name = f"model-{i:03d}"
            self.models[name] = ModelView(
                spec=ModelSpec(
                    name=name,
                    source=f"hf:org/{name}-GGUF:q4_k_m.gguf",
                    profiles=[ModelProfile(name="default", engine="llama.cpp")],
                    replicas_min=1,
                    replicas_max=1,
                ),
                replicas_desired=1,
                replicas_ready=1,
                state="serving",
            )
            rid = f"{name}-r1"
            self.replicas[rid] = ReplicaView(
                replica_id=rid,
                model=name,
                profile="default",
                node_id=node_ids[i % len(node_ids)] if node_ids else "",
                state="ready",
                since=_now(),
            )
        self.watchers: set[_Watcher] = set()
        self.events_published = 0
        self.events_sent = 0

    def publish(self, event: WatchEvent) -> None:
        self.events_published += 1
        for watcher in self.watchers:
            watcher.offer(event)

    async def churn(self, node_events_per_s: float, model_events_per_s: float) -> None:
        """Heartbeats on random nodes; models and replicas going ready ↔ starting."""
        rng = random.Random(11)
        node_ids, names = list(self.nodes), list(self.models)
        tick_s = 0.05
        node_debt = model_debt = 0.0
        while True:
            await asyncio.sleep(tick_s)
            node_debt += node_events_per_s * tick_s
            model_debt += model_events_per_s * tick_s
            while node_ids and node_debt >= 1:
                node_debt -= 1
                n = self.nodes[rng.choice(node_ids)]
                n.last_heartbeat_at = _now()
                n.heartbeat_seq += 1
                self.publish(WatchEvent(topic="nodes", key=n.node_id, node=n))
            while names and model_debt >= 1:
                model_debt -= 1
                m = self.models[rng.choice(names)]
                ready = m.replicas_ready == 0
                m.replicas_ready = 1 if ready else 0
                m.state = "serving" if ready else "starting"
                m.reason = "" if ready else "1 replica starting"
                r = self.replicas[f"{m.spec.name}-r1"]
                r.state, r.since = ("ready" if ready else "starting"), _now()
                self.publish(WatchEvent(topic="models", key=m.spec.name, model=m))
                self.publish(WatchEvent(topic="replicas", key=r.replica_id, replica=r))

    # -- the admin calls the console makes ------------------------------------------

    async def status(self, message: StatusRequest) -> StatusReply:
        ready = sum(1 for n in self.nodes.values() if n.state == "ready")
        return StatusReply(
            version="0.1.0",
            cluster_name="bench",
            leader=True,
            store_backend="sqlite",
            nodes_total=len(self.nodes),
            nodes_ready=ready,
        )

    async def list_nodes(self, message: ListNodesRequest) -> ListNodesReply:
        return ListNodesReply(nodes=list(self.nodes.values()))

    async def get_node(self, message: GetNodeRequest) -> NodeView:
        if message.node_id not in self.nodes:
            raise GRPCError(Status.NOT_FOUND, f"no node named {message.node_id!r}")
        return self.nodes[message.node_id]

    async def list_models(self, message: ListModelsRequest) -> ListModelsReply:
        return ListModelsReply(models=list(self.models.values()))

    async def get_model(self, message: GetModelRequest) -> ModelView:
        if message.name not in self.models:
            raise GRPCError(Status.NOT_FOUND, f"no model named {message.name!r}")
        return self.models[message.name]

    async def list_replicas(self, message: ListReplicasRequest) -> ListReplicasReply:
        return ListReplicasReply(
            replicas=[
                r for r in self.replicas.values() if r.model == message.model or not message.model
            ]
        )

    async def list_engines(self, message: ListEnginesRequest) -> ListEnginesReply:
        return ListEnginesReply()

    async def warnings(self, message: WarningsRequest) -> WarningsReply:
        return WarningsReply()

    async def list_tenants(self, message: ListTenantsRequest) -> ListTenantsReply:
        return ListTenantsReply()

    async def list_keys(self, message: ListKeysRequest) -> ListKeysReply:
        return ListKeysReply()

    async def usage(self, message: UsageRequest) -> UsageReply:
        return UsageReply(from_=message.from_, to=message.to, series_step_s=3600)

    async def watch(self, message: WatchRequest) -> AsyncIterator[WatchEvent]:
        watcher = _Watcher(frozenset(message.topics))
        self.watchers.add(watcher)
        try:
            while True:
                await watcher.wake.wait()
                watcher.wake.clear()
                batch, watcher.pending = list(watcher.pending.values()), {}
                for event in batch:
                    self.events_sent += 1
                    yield event
        finally:
            self.watchers.discard(watcher)


class _Watcher:
    """One open Watch. As gatewayd's does (gatewayd/nodes/watch.py), it keeps only the
    latest change of each key not yet sent: a console that falls behind gets one notice
    per node per drain, not a backlog."""

    def __init__(self, topics: frozenset[str]) -> None:
        self.topics = topics
        self.pending: dict[tuple[str, str], WatchEvent] = {}
        self.wake = asyncio.Event()

    def offer(self, event: WatchEvent) -> None:
        if event.topic in self.topics:
            self.pending[(event.topic, event.key)] = event
            self.wake.set()


async def serve(cluster: FakeCluster, token: str) -> tuple[Server, int]:
    server = Server([cluster])

    async def check_token(event: RecvRequest) -> None:
        if event.metadata.get("authorization") != f"Bearer {token}":
            raise GRPCError(Status.UNAUTHENTICATED, "the admin token was refused")

    listen(server, RecvRequest, check_token)
    await server.start("127.0.0.1", 0)
    return server, server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
