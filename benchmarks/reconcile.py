"""Benchmark: a reconcile pass of the real Reconciler over a large cluster.

N nodes of 8 GPUs (cycling through the recorded inventories) register with a
real NodeRegistry on a real SQLite store; their agents are played by a
function that acknowledges every command at once. M models (sim engine,
sized from their profiles: one card of 10-70 GiB) are added to the catalog.

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
from proto.llmgw.v1 import CommandAck, Register, ShardStatus

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hardware"
GPU_FIXTURES = ["h100_80g_x8", "a100_40g_x2_nvlink", "l4_24g_x4", "rtx6000_24g_x1"]
GIB = 2**30


def eight_cards(name: str) -> Inventory:
    inv = Inventory.model_validate_json((FIXTURES / f"{name}.json").read_text())
    card = inv.gpus[0]
    gpus = [card.model_copy(update={"index": i, "uuid": f"{card.uuid}-{i}"}) for i in range(8)]
    return inv.model_copy(update={"gpus": gpus})


async def build(tmp: Path, n_nodes: int, n_models: int):
    store = SqliteStore(tmp / "bench.db")
    await store.open()
    registry = NodeRegistry(store, not_ready_grace_s=15)
    catalog = Catalog(store, registry.watch)
    reconciler = Reconciler(store, registry, catalog, engine_key="k")
    shapes = [eight_cards(n) for n in GPU_FIXTURES]
    for i in range(n_nodes):
        inv = shapes[i % len(shapes)]
        node_id = f"node-{i:04d}"
        session = await registry.register(
            Register(
                node_id=node_id,
                hostname=node_id,
                host=host_to_proto(inv.host),
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
        per_card = (10 + (m % 7) * 10) * GIB
        await catalog.put(
            Model(
                name=f"model-{m:04d}",
                source="/models/m.gguf",
                profiles=[Profile(engine="sim", gpu=GpuNeed(count=1, min_memory_bytes=per_card))],
            ).model_dump(mode="json")
        )
    return store, registry, reconciler


async def run(n_nodes: int, n_models: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store, _registry, reconciler = await build(Path(tmp), n_nodes, n_models)
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
        await store.close()
    return {
        "nodes": n_nodes,
        "models": n_models,
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
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    result = asyncio.run(run(args.nodes, args.models))
    print(
        f"{result['nodes']} nodes x 8 GPUs, {result['models']} models: "
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
