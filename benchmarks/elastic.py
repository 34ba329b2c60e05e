"""Benchmark: elastic serving — the on-demand start against a warm replica, and the scaler.

1. **On demand.** The starter model (gemma-3-270m on llama.cpp, CPU) at
   ``min 0``: the time from the first request to its first streamed token,
   with the replica placed, fetched and started for it, against the same
   request to the replica once warm (several, the median). Repeated after
   each eviction (``--cold N`` times).
3. **Churn.** 50 on-demand sim models (one 70 GiB card each) on a fake node
   of 8 H100s, asked for in random order (a few often, most rarely) by 16
   clients: requests answered and failed, how long a request waited for its
   model to start (held) against one whose model was running, and how often
   a card was given over from an idle model to an asked one.
2. **The scaler.** Sim replicas (``min 1``, ``max 3``, 2 slots each) under a
   step of load (12 clients, streamed), then one client: the time from the
   step to each scale-up and from its end to each scale-down, the changes
   made (goal: one a step, none undone), and the requests that failed.

Through a real gatewayd and agent (``tests/cluster_fixture.py``), the openai
SDK as client. Printed, never judged. Run:
``python benchmarks/elastic.py [--cold 3] [--up-after 5] [--down-after 10] [--churn 300]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from gatewayd.admin.views import model_spec
from llmgw.scaling import OnDemandConfig, ScalingConfig
from llmgw.setup import starter
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for
from tests.models_fixture import MODELS_CACHE_DIR

PROJECT = "bench/elastic/run"


async def _first_token_s(gpt: openai.AsyncOpenAI, model: str) -> float:
    t0 = time.perf_counter()
    stream = await gpt.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello"}],
        max_tokens=8,
        stream=True,
    )
    first = None
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - t0
    return first if first is not None else float("nan")


async def _active(admin, model: str) -> int:
    return sum(1 for r in (await admin.list_replicas(model)).replicas if r.state != "stopped")


async def on_demand(work: Path, cold: int) -> None:
    gguf = starter.assemble(MODELS_CACHE_DIR)

    def configure(cfg) -> None:
        cfg.on_demand = OnDemandConfig(evict_after_idle_s=2, min_lifetime_s=0)

    async with running_cluster(work / "ondemand", configure=configure) as cluster:
        await cluster.start_agent("cpu-node")
        model = starter.model(gguf).model_copy(update={"replicas_min": 0, "replicas_max": 1})
        async with cluster.admin() as admin:
            await admin.put_model(model_spec(model), create_only=True)
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
            gpt = openai.AsyncOpenAI(
                base_url=f"http://127.0.0.1:{cluster.server.ports['http']}/v1",
                api_key=key.secret,
                max_retries=0,
                timeout=120,
            )
            colds, warms = [], []
            for _ in range(cold):
                colds.append(await _first_token_s(gpt, model.name))
                warms += [await _first_token_s(gpt, model.name) for _ in range(5)]
                await wait_for(lambda: _gone(admin, model.name), attempts=1200, interval_s=0.1)
            await gpt.close()
    print("on demand: llama.cpp starter (gemma-3-270m Q4_K_M) on CPU, time to first token")
    print(f"  cold (replica started for it): {', '.join(f'{s:.2f} s' for s in colds)}"
          f"  (median {statistics.median(colds):.2f} s)")  # fmt: skip
    print(f"  warm replica:                  median {statistics.median(warms) * 1000:.0f} ms"
          f" of {len(warms)} (min {min(warms) * 1000:.0f}, max {max(warms) * 1000:.0f})")  # fmt: skip


async def _gone(admin, model: str):
    return await _active(admin, model) == 0 or None


async def scaler(work: Path, up_after: float, down_after: float) -> None:
    def configure(cfg) -> None:
        cfg.scaling = ScalingConfig(
            up_after_s=up_after, down_after_s=down_after, cooldown_s=1, low_per_slot=0.6
        )

    spec = ModelSpec(
        name="chat",
        source="/models/none.gguf",
        replicas_min=1,
        replicas_max=3,
        slots=2,
        profiles=[
            ModelProfile(
                name="default",
                engine="sim",
                startup_timeout_s=60,
                args=["--ttft-ms", "30", "--itl-ms", "10", "--tokens", "40"],
            )
        ],
    )
    async with running_cluster(work / "scaler", configure=configure) as cluster:
        await cluster.start_agent("cpu-node")
        async with cluster.admin() as admin:
            await admin.put_model(spec)
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)

            async def ready_count() -> int:
                return sum(
                    1 for r in (await admin.list_replicas("chat")).replicas if r.state == "ready"
                )

            await wait_for(lambda: _at(ready_count, 1), attempts=600)
            gpt = openai.AsyncOpenAI(
                base_url=f"http://127.0.0.1:{cluster.server.ports['http']}/v1",
                api_key=key.secret,
                max_retries=0,
            )
            failed = answered = 0

            async def client(stop: asyncio.Event) -> None:
                nonlocal failed, answered
                while not stop.is_set():
                    try:
                        s = await gpt.chat.completions.create(
                            model="chat", messages=[{"role": "user", "content": "hi"}],
                            stream=True,
                        )  # fmt: skip
                        async for _ in s:
                            pass
                        answered += 1
                    except openai.OpenAIError:
                        failed += 1

            marks: list[tuple[str, float]] = []
            t0 = time.perf_counter()
            heavy = asyncio.Event()
            clients = [asyncio.create_task(client(heavy)) for _ in range(12)]
            for n in (2, 3):
                await wait_for(lambda n=n: _at(ready_count, n), attempts=3000, interval_s=0.05)
                marks.append((f"ready at {n}", time.perf_counter() - t0))
            heavy.set()
            await asyncio.gather(*clients)
            t1 = time.perf_counter()
            light = asyncio.Event()
            trickle = asyncio.create_task(client(light))
            for n in (2, 1):
                await wait_for(lambda n=n: _at(ready_count, n), attempts=3000, interval_s=0.05)
                marks.append((f"down to {n}", time.perf_counter() - t1))
            light.set()
            await trickle
            changes = [c for c in cluster.server.reconciler.scaler.changes if c.model == "chat"]
            await gpt.close()
    print(f"scaler: sim, 2 slots a replica, 1..3; up_after {up_after:g} s, down_after "
          f"{down_after:g} s, cooldown 1 s; 12 clients, then 1")  # fmt: skip
    for what, at in marks:
        since = "the step" if what.startswith("ready") else "its end"
        print(f"  {what}: {at:.1f} s after {since}")
    print(f"  changes: {len(changes)} ({', '.join(f'{c.before}→{c.after}' for c in changes)}); "
          f"requests answered {answered}, failed {failed}")  # fmt: skip


async def _at(count, n: int):
    return await count() == n or None


async def churn(work: Path, models: int, requests: int) -> None:
    import random

    from proto.llmgw.v1 import GpuNeed

    def configure(cfg) -> None:
        cfg.on_demand = OnDemandConfig(evict_after_idle_s=600, min_lifetime_s=0)

    rng = random.Random(7)
    names = [f"m{i:02d}" for i in range(models)]
    # A few often, most rarely (Zipf's 1/rank).
    weights = [1 / (i + 1) for i in range(models)]
    async with running_cluster(work / "churn", configure=configure) as cluster:
        await cluster.start_agent("h100-box", fixture="h100_80g_x8")
        await cluster.wait_nodes_ready("h100-box")
        async with cluster.admin() as admin:
            for name in names:
                await admin.put_model(
                    ModelSpec(
                        name=name,
                        source="/models/none.gguf",
                        replicas_min=0,
                        replicas_max=1,
                        slots=4,
                        profiles=[
                            ModelProfile(
                                name="default",
                                engine="sim",
                                startup_timeout_s=60,
                                gpu=GpuNeed(count=1, min_memory_bytes=70 * 2**30),
                                args=["--ttft-ms", "20", "--itl-ms", "5", "--tokens", "20"],
                            )
                        ],
                    )
                )
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
        gpt = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{cluster.server.ports['http']}/v1",
            api_key=key.secret,
            max_retries=0,
            timeout=120,
        )
        cold, warm, failed = [], [], []
        todo = rng.choices(names, weights, k=requests)

        async def client() -> None:
            while todo:
                name = todo.pop()
                running = any(
                    r.model == name and r.state == "ready"
                    for r in cluster.server.reconciler.replicas.values()
                )
                try:
                    s = await _first_token_s(gpt, name)
                    (warm if running else cold).append(s)
                except openai.APIStatusError as e:
                    failed.append(f"{e.status_code} {(e.body or {}).get('code', '')}")

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(16)))
        took = time.perf_counter() - t0
        given = sum(
            1
            for r in cluster.server.reconciler.replicas.values()
            if any("asked for now: this on-demand model is idle" in e.reason for e in r.history)
        )
        await gpt.close()
    q = statistics.quantiles
    print(f"churn: {models} on-demand models on 8 fake H100s, {requests} requests by 16 clients"
          f" in {took:.1f} s")  # fmt: skip
    print(f"  answered {len(cold) + len(warm)}, failed {len(failed)} {sorted(set(failed))}")
    if cold:
        print(f"  held while its model started: {len(cold)}, first token p50 "
              f"{statistics.median(cold):.2f} s, p90 {q(cold, n=10)[-1]:.2f} s, "
              f"max {max(cold):.2f} s")  # fmt: skip
    if warm:
        print(f"  model running: {len(warm)}, first token p50 "
              f"{statistics.median(warm) * 1000:.0f} ms")  # fmt: skip
    print(f"  cards given over from an idle model to an asked one: at least {given}"
          " (replicas forgotten a minute after they stop are not counted)")  # fmt: skip


async def main(cold: int, up_after: float, down_after: float, churn_n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-elastic-") as tmp:
        await on_demand(Path(tmp), cold)
        await scaler(Path(tmp), up_after, down_after)
        if churn_n:
            await churn(Path(tmp), 50, churn_n)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cold", type=int, default=3, help="on-demand starts measured")
    p.add_argument("--up-after", type=float, default=5.0)
    p.add_argument("--down-after", type=float, default=10.0)
    p.add_argument("--churn", type=int, default=300, help="requests of the churn (0: none)")
    a = p.parse_args()
    asyncio.run(main(a.cold, a.up_after, a.down_after, a.churn))
