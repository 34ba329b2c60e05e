"""Placement's view of the nodes: hardware, state, and what replicas already hold."""

from __future__ import annotations

from collections.abc import Iterable

from gatewayd.controller import replica as rs
from gatewayd.controller.replica import Replica
from gatewayd.nodes.registry import NodeLive
from gatewayd.nodes.weights import models_cached
from llmgw.inventory import inventory_from_proto
from llmgw.labels import effective
from llmgw.placement import NodeCandidate
from proto.llmgw.v1 import Gpu, HostFacts


def live_inventory(live: NodeLive):
    """The node's hardware as placement reads it, converted once per registration."""
    cached = getattr(live, "_inventory", None)
    if cached is not None and cached[0] is live.host_msg:
        return cached[1]
    rec = live.record
    if live.host_msg is not None:
        host, gpus = live.host_msg, live.gpus_msg
    else:
        host = HostFacts.from_dict(rec.host) if rec.host else HostFacts()
        gpus = [Gpu.from_dict(g) for g in rec.gpus]
    inventory = inventory_from_proto(host, gpus)
    live._inventory = (live.host_msg, inventory)
    return inventory


def engine_words(live: NodeLive) -> dict[str, str]:
    """Engine -> the node's own words for it ("installed", "failed: …")."""
    out = {}
    for name, st in live.engines.items():
        out[name] = f"{st.state}: {st.message}" if st.message else st.state
    return out


def node_candidates(
    nodes: Iterable[NodeLive], replicas: Iterable[Replica], exclude: set[str] = frozenset()
) -> list[NodeCandidate]:
    """Every node with what replicas hold on it, leaving out the replicas in ``exclude``."""
    used_gpu: dict[str, dict[int, int]] = {}
    used_host: dict[str, int] = {}
    used_cores: dict[str, int] = {}
    cached: dict[str, set[str]] = {}
    for r in replicas:
        if r.replica_id in exclude or not r.node_id:
            continue
        cached.setdefault(r.node_id, set()).add(r.model)
        if r.state not in rs.ACTIVE:
            continue
        per = used_gpu.setdefault(r.node_id, {})
        for idx, n in r.per_gpu_bytes.items():
            per[int(idx)] = per.get(int(idx), 0) + n
        used_host[r.node_id] = used_host.get(r.node_id, 0) + r.host_memory_bytes
        if r.cores:
            used_cores[r.node_id] = used_cores.get(r.node_id, 0) + r.cores
    out = []
    for live in nodes:
        rec = live.record
        inventory = live_inventory(live)
        gpu_used = dict(used_gpu.get(rec.node_id, {}))
        if live.heartbeat is not None:
            # Memory other processes hold on a card is not ours to give.
            for s in live.heartbeat.gpus:
                if s.memory_foreign_bytes:
                    gpu_used[s.index] = gpu_used.get(s.index, 0) + s.memory_foreign_bytes
        out.append(
            NodeCandidate(
                node_id=rec.node_id,
                state=rec.state,
                cordoned=rec.cordoned,
                draining=rec.draining,
                labels=effective(rec.labels, rec.operator_labels),
                installable_engines=list(rec.installable_engines),
                engines_installed=engine_words(live),
                inventory=inventory,
                gpu_used_bytes=gpu_used,
                host_memory_used_bytes=used_host.get(rec.node_id, 0),
                cores_used=used_cores.get(rec.node_id, 0),
                # Where its replicas ran, and what its weights cache says it holds.
                models_cached=cached.get(rec.node_id, set()) | models_cached(live.weights),
            )
        )
    return out
