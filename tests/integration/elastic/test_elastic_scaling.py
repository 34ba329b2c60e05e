"""A model between min and max follows its load: sim replicas under a step of load go from
1 to max, then back to min once it passes, each change with its reason, and no request
fails on the way up or down (a replica taken away is drained: its answers finish first).
Through a real gatewayd and agent, sim engines as real processes, the openai SDK as client."""

from __future__ import annotations

import asyncio

import openai

from llmgw.scaling import ScalingConfig
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

PROJECT = "Acme/ml/elastic"
MAX = 3
# About half a second an answer, streamed, so that requests are in flight when a
# replica is taken away.
SIM = ["--ttft-ms", "30", "--itl-ms", "10", "--tokens", "40"]


def _spec() -> ModelSpec:
    return ModelSpec(
        name="chat",
        source="/models/none.gguf",
        replicas_min=1,
        replicas_max=MAX,
        slots=2,
        profiles=[ModelProfile(name="default", engine="sim", startup_timeout_s=60, args=SIM)],
    )


def _windows(cfg) -> None:
    # Short windows so the test is quick; the rule is the one in force by default.
    cfg.scaling = ScalingConfig(up_after_s=2, down_after_s=3, cooldown_s=1, low_per_slot=0.6)


async def _ready(admin) -> int:
    return sum(1 for r in (await admin.list_replicas("chat")).replicas if r.state == "ready")


async def test_replicas_follow_a_step_of_load_up_to_max_and_back_to_min(tmp_path):
    async with running_cluster(tmp_path, configure=_windows) as cluster:
        await cluster.start_agent("cpu-node")
        async with cluster.admin() as admin:
            await admin.put_model(_spec())
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
            await wait_for(lambda: _ready(admin), attempts=600)
        port = cluster.server.ports["http"]
        gpt = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=key.secret, max_retries=0
        )
        failures: list[BaseException] = []
        answered = 0
        most = 0

        async def client(stop: asyncio.Event) -> None:
            nonlocal answered
            while not stop.is_set():
                try:
                    stream = await gpt.chat.completions.create(
                        model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
                    )
                    text = "".join([c.choices[0].delta.content or "" async for c in stream])
                    assert text, "an empty answer"
                    answered += 1
                except Exception as e:  # noqa: BLE001  (every failure is kept and shown)
                    failures.append(e)

        async def replicas_seen(n: int):
            nonlocal most
            count = await _ready(admin)
            most = max(most, count)
            return count == n or None

        async with cluster.admin() as admin:
            # The step: twelve clients at once, six a slot for one replica.
            heavy = asyncio.Event()
            clients = [asyncio.create_task(client(heavy)) for _ in range(12)]
            await wait_for(lambda: replicas_seen(MAX), attempts=1200, interval_s=0.1)
            heavy.set()
            await asyncio.gather(*clients)
            # After it: one client, which one replica of two slots carries.
            light = asyncio.Event()
            trickle = asyncio.create_task(client(light))
            await wait_for(lambda: replicas_seen(1), attempts=1200, interval_s=0.1)
            light.set()
            await trickle
            assert failures == [], failures[:3]
            assert answered > 12
            assert most == MAX  # never past max

            changes = [
                w.message
                for w in reversed((await admin.warnings(600)).warnings)
                if w.kind == "scale" and w.subject == "chat"
            ]
            assert [c.split(":")[0] for c in changes] == [
                "1 → 2 replicas",
                "2 → 3 replicas",
                "3 → 2 replicas",
                "2 → 1 replicas",
            ], changes
            assert "requests a slot" in changes[0] or "queued" in changes[0]

            async def drained():
                replicas = (await admin.list_replicas("chat")).replicas
                return all(r.state in ("ready", "stopped") for r in replicas) or None

            await wait_for(drained, attempts=600, interval_s=0.1)
            # Each replica's history says why it was started or stopped.
            history = [
                e.reason for r in (await admin.list_replicas("chat")).replicas for e in r.history
            ]
            assert any(h.startswith("waiting to be placed (scaled up to 2:") for h in history)
            assert any(h.startswith("waiting to be placed (scaled up to 3:") for h in history)
            assert any(h.startswith("scaled down to 2:") for h in history)
            assert any(
                h.startswith("scaled down to 1:") and h.endswith("its requests finished; stopping")
                for h in history
            )
            view = await admin.get_model("chat")
            assert view.replicas_desired == 1
        await gpt.close()
