"""Benchmark: placement decisions over a large cluster built from the recorded inventories.

What it answers: does one placement decision over 1,000 nodes of 8 GPUs take
under 50 ms, and how long do 500 decisions in a row take (the placement part
of a reconcile pass that places 500 models; the goal for the whole pass is
under 1 s)? For scale, GPUStack reported 24 s to over 21 minutes to place one
model on 8 to 19 workers (gpustack/gpustack PR #1167, #1312).

The cluster cycles through the GPU models of tests/fixtures/hardware (H100
80 GB with NVSwitch, A100 40 GB in NVLink pairs, L4 24 GB, Quadro RTX 6000
24 GB), eight cards a node, each node with its fixture's host. A seeded share
of the nodes is not ready, cordoned or draining, has a failed engine, or has
cards partly in use; some have weights cached. The requests cycle through
plans a planner would give: one card, TP 2, TP 4 with a TP 2 fallback, TP 8,
FP8 needing compute capability 8.9, a CPU layout behind a GPU one, one that
fits nowhere (so the refusal path, with a reason for every node, is timed
too), and two with a layout per kind of card, as model planning makes them.

Two figures:

1. one decision: ``--decisions`` decisions (default 200) against the same
   cluster, nothing reserved, p50/p95/max. The very first decision builds each
   node's hardware cache and is reported apart as ``cold``.
2. a pass: ``--sequential`` decisions (default 500) one after another on a
   fresh cluster, each placement reserved on its node before the next.

Figures are printed, never judged: tests/benchmarks only checks the script
runs. Run: ``python benchmarks/placement.py [--nodes 1000] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from llmgw.catalog.model import GpuNeed
from llmgw.inventory import Inventory
from llmgw.modelplan.types import CardNeed, Layout, ModelFacts, Plan
from llmgw.placement import NodeCandidate, PlacementRequest, place

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "hardware"
GIB = 1024**3
GPUS_PER_NODE = 8
GOAL_ONE_MS = 50.0
GOAL_PASS_S = 1.0
# (fixture, NVLink topology for eight of its cards)
GPU_MODELS = [
    ("h100_80g_x8", "all"),
    ("a100_40g_x2_nvlink", "pairs"),
    ("l4_24g_x4", "none"),
    ("rtx6000_24g_x1", "none"),
]


def eight_card_inventory(fixture: str, topology: str) -> Inventory:
    """The fixture's host with eight copies of its first card."""
    src = Inventory.model_validate_json((FIXTURES / f"{fixture}.json").read_text())
    card = src.gpus[0]
    gpus = []
    for i in range(GPUS_PER_NODE):
        if topology == "all":
            peers = [j for j in range(GPUS_PER_NODE) if j != i]
        elif topology == "pairs":
            peers = [i ^ 1]
        else:
            peers = []
        gpus.append(
            card.model_copy(
                update={"index": i, "uuid": f"{card.uuid[:-2]}{i:02d}", "nvlink_peers": peers}
            )
        )
    return Inventory(host=src.host, gpus=gpus)


def build_cluster(n: int, seed: int) -> list[NodeCandidate]:
    rng = random.Random(seed)
    inventories = [eight_card_inventory(f, t) for f, t in GPU_MODELS]
    nodes = []
    for k in range(n):
        inv = inventories[k % len(inventories)]
        roll = rng.random()
        state = "not_ready" if roll < 0.02 else "ready"
        engines = {"llama.cpp": "installed b5000"}
        if rng.random() < 0.02:
            engines["vllm"] = "failed: libstdc++.so.6 is too old (needs GLIBCXX_3.4.30)"
        used = {}
        if rng.random() < 0.4:
            for i in rng.sample(range(GPUS_PER_NODE), rng.randint(1, 6)):
                used[i] = int(inv.gpus[i].memory_total_bytes * rng.uniform(0.2, 1.0))
        nodes.append(
            NodeCandidate(
                node_id=f"node-{k:04d}",
                state=state,
                cordoned=0.02 <= roll < 0.03,
                draining=0.03 <= roll < 0.04,
                labels={"zone": "a" if k % 2 else "b"},
                installable_engines=["llama.cpp", "vllm", "sglang", "sim"],
                engines_installed=engines,
                inventory=inv,
                gpu_used_bytes=used,
                host_memory_used_bytes=0,
                models_cached={f"model-{rng.randrange(40)}"} if rng.random() < 0.3 else set(),
            )
        )
    return nodes


def _gpu(cards: int, gib_each: float, card_name: str = "") -> Layout:
    per = int(gib_each * GIB)
    return Layout(
        kind="gpu",
        card_name=card_name,
        gpus=cards,
        tensor_parallel=cards,
        per_card=CardNeed(
            weights_bytes=per * 8 // 10, kv_bytes=per // 10, overhead_bytes=per // 10
        ),
    )


def _plan(*layouts: Layout) -> Plan:
    return Plan(
        facts=ModelFacts(format="safetensors"),
        context=8192,
        kv_bytes_per_token=0,
        layouts=list(layouts),
    )


def requests() -> list[PlacementRequest]:
    """One request per kind of plan; the i-th model cycles through them."""
    cc89 = GpuNeed(min_compute_capability="8.9")
    cc80 = GpuNeed(min_compute_capability="8.0")
    card_names = [
        Inventory.model_validate_json((FIXTURES / f"{f}.json").read_text()).gpus[0].name
        for f, _ in GPU_MODELS
    ]
    kinds = [
        ("llama.cpp", None, _plan(_gpu(1, 18))),
        ("vllm", cc80, _plan(_gpu(2, 36))),
        ("vllm", cc80, _plan(_gpu(2, 70), _gpu(4, 36))),
        ("vllm", cc89, _plan(_gpu(1, 30))),
        ("vllm", cc80, _plan(_gpu(8, 65))),
        ("llama.cpp", None, _plan(_gpu(1, 60), Layout(kind="cpu", host_memory_bytes=48 * GIB))),
        ("vllm", None, _plan(_gpu(1, 300), _gpu(8, 150))),  # fits nowhere
        # As model planning gives them: a layout per kind of card, fastest first.
        ("llama.cpp", None, _plan(*(_gpu(1, 7, name) for name in card_names))),
        ("vllm", None, _plan(_gpu(4, 38, card_names[0]), _gpu(2, 36, card_names[1]))),
    ]
    return [
        PlacementRequest(model=f"model-{i}", engine=engine, gpu=gpu, plan=plan)
        for i, (engine, gpu, plan) in enumerate(kinds)
    ]


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def run(n_nodes: int, n_decisions: int, n_sequential: int, seed: int) -> dict:
    kinds = requests()
    nodes = build_cluster(n_nodes, seed)
    t = time.perf_counter()
    place(kinds[0], nodes)
    cold_ms = (time.perf_counter() - t) * 1000
    times, refused = [], 0
    for i in range(n_decisions):
        t = time.perf_counter()
        d = place(kinds[i % len(kinds)], nodes)
        times.append((time.perf_counter() - t) * 1000)
        refused += d.placement is None

    nodes = build_cluster(n_nodes, seed)
    place(kinds[0], nodes)  # warm the hardware caches, as a running controller has them
    by_id = {n.node_id: n for n in nodes}
    placed = 0
    seq = []
    t0 = time.perf_counter()
    for i in range(n_sequential):
        base = kinds[i % len(kinds)]
        req = base.model_copy(update={"model": f"model-{i}"})
        t = time.perf_counter()
        d = place(req, nodes)
        if d.placement is not None:
            p = d.placement
            by_id[p.node_id].reserve(p.per_gpu_bytes, p.host_memory_bytes)
            placed += 1
        seq.append((time.perf_counter() - t) * 1000)
    pass_s = time.perf_counter() - t0
    return {
        "nodes": n_nodes,
        "gpus": n_nodes * GPUS_PER_NODE,
        "one_decision_ms": {
            "n": n_decisions,
            "cold": round(cold_ms, 2),
            "p50": round(statistics.median(times), 2) if times else None,
            "p95": round(_pct(times, 0.95), 2) if times else None,
            "max": round(max(times), 2) if times else None,
            "refused": refused,
        },
        "sequential": {
            "n": n_sequential,
            "total_s": round(pass_s, 3),
            "mean_ms": round(statistics.mean(seq), 2) if seq else None,
            "p95_ms": round(_pct(seq, 0.95), 2) if seq else None,
            "placed": placed,
            "refused": n_sequential - placed,
        },
        "goal": {"one_decision_ms": GOAL_ONE_MS, "pass_s": GOAL_PASS_S},
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--decisions", type=int, default=200)
    ap.add_argument("--sequential", type=int, default=500)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    r = run(args.nodes, args.decisions, args.sequential, args.seed)
    one, seq = r["one_decision_ms"], r["sequential"]
    print(f"cluster: {r['nodes']} nodes x {GPUS_PER_NODE} GPUs = {r['gpus']} GPUs")
    print(
        f"one decision: p50 {one['p50']} ms, p95 {one['p95']} ms, max {one['max']} ms "
        f"over {one['n']} ({one['refused']} refused); cold {one['cold']} ms "
        f"(goal < {GOAL_ONE_MS:.0f} ms)"
    )
    print(
        f"{seq['n']} decisions in a row, each reserved: {seq['total_s']} s "
        f"(mean {seq['mean_ms']} ms, p95 {seq['p95_ms']} ms; {seq['placed']} placed, "
        f"{seq['refused']} refused; goal for a whole pass < {GOAL_PASS_S:.0f} s)"
    )
    print("for scale: GPUStack took 24 s to over 21 min to place one model on 8-19 workers")
    if args.json:
        args.json.write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
