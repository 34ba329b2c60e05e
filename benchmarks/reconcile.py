"""Benchmark: a reconcile pass of the real Reconciler over a large cluster.

N nodes of 8 GPUs (cycling through the recorded inventories, each with its
own measured memory bandwidth, as agents report it) register with a real
NodeRegistry on a real SQLite store; their agents are played by a function
that acknowledges every command at once. M models are added to the catalog:
``--sized stated`` (sim engine, sized from their profiles: one card of
10-70 GiB), or ``--sized known`` (the default), models of 1-70 B parameters
whose facts the control plane holds as if it had read them (a repository's
config and shard headers for vLLM, a GGUF's metadata for llama.cpp, half
each), so every decision plans the model over the nodes' shapes.

Figures:
1. cold pass: every model placed and started (M placements, M StartShards,
   M store writes);
2. steady pass: every replica reported ready; the pass that finds nothing to do
   (what runs every 2 s in production).

Printed, never judged. Run: ``python benchmarks/reconcile.py [--nodes 1000] [--models 500]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from gatewayd.catalog.catalog import Catalog
from gatewayd.controller.reconciler import Reconciler
from gatewayd.nodes.registry import NodeRegistry
from gatewayd.store import SqliteStore
from llmgw.catalog import GpuNeed, Model, Profile
from llmgw.inventory import Inventory, gpu_to_proto, host_to_proto
from llmgw.modelplan.types import ModelFacts
from proto.llmgw.v1 import CommandAck, Register, ShardStatus

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hardware"
GPU_FIXTURES = ["h100_80g_x8", "a100_40g_x2_nvlink", "l4_24g_x4", "rtx6000_24g_x1"]
GIB = 2**30


def eight_cards(name: str) -> Inventory:
    inv = Inventory.model_validate_json((FIXTURES / f"{name}.json").read_text())
    card = inv.gpus[0]
    linked = bool(card.nvlink_peers)  # an NVLink card's eight copies are all joined
    gpus = [
        card.model_copy(
            update={
                "index": i,
                "uuid": f"{card.uuid}-{i}",
                "nvlink_peers": [j for j in range(8) if j != i] if linked else [],
            }
        )
        for i in range(8)
    ]
    return inv.model_copy(update={"gpus": gpus})


def bandwidth_gbs(i: int) -> float:
    """A node's measured memory bandwidth: 20-200 GB/s, no two nodes alike to the 0.01."""
    return round(20.0 + (i * 7.919) % 180.0, 2)


def known_facts(m: int) -> ModelFacts:
    """A dense model of 1-70 B parameters: bf16 safetensors for vLLM, a Q8 GGUF for llama.cpp."""
    billions = (1, 3, 7, 8, 13, 14, 32, 70)[m % 8]
    params = billions * 10**9
    gguf = m % 2 == 1
    weights = params if gguf else params * 2
    layers = {1: 16, 3: 28, 7: 32, 8: 32, 13: 40, 14: 48, 32: 64, 70: 80}[billions]
    return ModelFacts(
        format="gguf" if gguf else "safetensors",
        architecture="LlamaForCausalLM",
        layers=layers,
        attention_heads=32 if billions < 32 else 64,
        kv_heads=8,
        head_dim=128,
        embedding_length=4096 if billions < 32 else 8192,
        trained_context=8192,
        quantisation="Q8_0" if gguf else "BF16",
        weights_bytes=weights,
        parameters=params,
        active_weights_bytes=weights,
    )


def known_model(m: int) -> Model:
    # Paths on the nodes only (the catalog takes them unseen): a repository
    # directory for vLLM, a GGUF for llama.cpp.
    vllm = m % 2 == 0
    return Model(
        name=f"model-{m:04d}",
        source=f"/models/model-{m:04d}" + ("" if vllm else ".gguf"),
        context_length=4096,
        profiles=[Profile(engine="vllm" if vllm else "llama.cpp")],
    )


def stated_model(m: int) -> Model:
    per_card = (10 + (m % 7) * 10) * GIB
    return Model(
        name=f"model-{m:04d}",
        source="/models/m.gguf",
        profiles=[Profile(engine="sim", gpu=GpuNeed(count=1, min_memory_bytes=per_card))],
    )


async def build(tmp: Path, n_nodes: int, n_models: int, sized: str = "known"):
    store = SqliteStore(tmp / "bench.db")
    await store.open()
    registry = NodeRegistry(store, not_ready_grace_s=15)
    catalog = Catalog(store, registry.watch)
    reconciler = Reconciler(store, registry, catalog, engine_key="k")
    shapes = [eight_cards(n) for n in GPU_FIXTURES]
    for i in range(n_nodes):
        inv = shapes[i % len(shapes)]
        node_id = f"node-{i:04d}"
        host = inv.host.model_copy(update={"mem_bandwidth_gbs": bandwidth_gbs(i)})
        session = await registry.register(
            Register(
                node_id=node_id,
                hostname=node_id,
                host=host_to_proto(host),
                gpus=[gpu_to_proto(g) for g in inv.gpus],
                installable_engines=["llama.cpp", "sim", "vllm"],
            ),
            address="127.0.0.1",
        )

        def ack(msg, _node=node_id):
            # The agent: acknowledges at once (the loop runs the ack next).
            asyncio.get_running_loop().call_soon(
                registry.acked, CommandAck(command_id=msg.command_id, ok=True)
            )

        registry.bind_session(node_id, session, lambda _why: None, ack)
    for m in range(n_models):
        model = known_model(m) if sized == "known" else stated_model(m)
        if sized == "known":
            # As if learn() had read the repository's config and shard headers.
            reconciler.sizing.remember(model, known_facts(m))
        await catalog.put(model.model_dump(mode="json"))
    return store, registry, reconciler


async def run(n_nodes: int, n_models: int, sized: str = "known") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store, _registry, reconciler = await build(Path(tmp), n_nodes, n_models, sized)
        try:
            return await _measure(store, reconciler, n_nodes, n_models, sized)
        finally:
            # An open store's thread would keep the process from ending on an error.
            await store.close()


async def _measure(store, reconciler, n_nodes: int, n_models: int, sized: str) -> dict:
    t0 = time.perf_counter()
    await reconciler.reconcile_once()
    cold_s = time.perf_counter() - t0
    placed = sum(1 for r in reconciler.replicas.values() if r.node_id)
    for r in list(reconciler.replicas.values()):
        if r.node_id:
            await reconciler.on_shard_status(
                r.node_id,
                ShardStatus(
                    shard_id=r.shard_id,
                    replica_id=r.replica_id,
                    state="ready",
                    reason="answers",
                    pid=1,
                    port=1,
                ),
            )
    steady = []
    for _ in range(5):
        t0 = time.perf_counter()
        await reconciler.reconcile_once()
        steady.append(time.perf_counter() - t0)
    ready = sum(1 for r in reconciler.replicas.values() if r.state == "ready")
    return {
        "nodes": n_nodes,
        "models": n_models,
        "sized": sized,
        "placed": placed,
        "ready": ready,
        "cold_pass_s": round(cold_s, 3),
        "steady_pass_s": round(min(steady), 4),
        "steady_pass_max_s": round(max(steady), 4),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--models", type=int, default=500)
    p.add_argument(
        "--sized",
        choices=("known", "stated"),
        default="known",
        help="known: hub facts (planned per node shape); stated: from profiles",
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    result = asyncio.run(run(args.nodes, args.models, args.sized))
    print(
        f"{result['nodes']} nodes x 8 GPUs, {result['models']} models "
        f"({result['sized']} sizes): "
        f"{result['placed']} placed, {result['ready']} ready"
    )
    print(f"cold pass (place + start all): {result['cold_pass_s']:.3f} s")
    print(
        f"steady pass (nothing to do):   {result['steady_pass_s'] * 1000:.1f} ms "
        f"(max {result['steady_pass_max_s'] * 1000:.1f} ms of 5)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["placed"] == result["models"] else 1


if __name__ == "__main__":
    sys.exit(main())
