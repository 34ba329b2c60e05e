"""A model's fallbacks answer in its place, in order: when the key's budget cannot pay for it,
and when it has no room. The answer names the model that served it, and so does the usage
row. Through a real gatewayd and agent, sim engines as real processes, the openai SDK."""

from __future__ import annotations

import openai

from proto.llmgw.v1 import GpuNeed, ModelPrice, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

PROJECT = "Acme/ml/fallbacks"


def _spec(name: str, *, priced=False, fallbacks=(), gpu_gib=0, replicas=1) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        replicas_min=replicas,
        replicas_max=max(replicas, 1),
        slots=4,
        fallbacks=list(fallbacks),
        profiles=[
            ModelProfile(
                name="default",
                engine="sim",
                startup_timeout_s=60,
                gpu=GpuNeed(count=1, min_memory_bytes=gpu_gib * 2**30) if gpu_gib else None,
            )
        ],
        price=ModelPrice(prompt_per_thousand=1000, completion_per_thousand=2000)
        if priced
        else None,
    )


async def _ready(admin, model: str):
    return any(r.state == "ready" for r in (await admin.list_replicas(model)).replicas) or None


def _ask(gpt, model: str):
    return gpt.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=5
    )


async def test_a_spent_budget_or_no_room_is_answered_by_the_fallback_and_the_row_says_so(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("cpu-node")
        async with cluster.admin() as admin:
            await admin.put_model(_spec("cheap"))
            await admin.put_model(_spec("chat", priced=True, fallbacks=["cheap"]))
            # On demand, needing a card this cluster does not have: never any room.
            await admin.put_model(_spec("vast", gpu_gib=200, replicas=0, fallbacks=["cheap"]))
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT, budget_month_micros=1)
            await wait_for(lambda: _ready(admin, "cheap"), attempts=600)
            await wait_for(lambda: _ready(admin, "chat"), attempts=600)
        gpt = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{cluster.server.ports['http']}/v1",
            api_key=key.secret,
            max_retries=0,
        )
        first = await _ask(gpt, "chat")
        assert first.model == "chat"
        # The first answer spent the key's budget: the free fallback answers now.
        second = await _ask(gpt, "chat")
        assert second.model == "cheap" and second.choices[0].message.content
        third = await _ask(gpt, "vast")
        assert third.model == "cheap"
        await gpt.close()

        async with cluster.admin() as admin:

            async def rows():
                got = [r async for r in admin.export_usage()]
                return got if len(got) == 3 else None

            got = await wait_for(rows, attempts=200, interval_s=0.1)
        pairs = sorted((r.model, r.served_model, r.status) for r in got)
        assert pairs == [
            ("chat", "chat", 200),
            ("chat", "cheap", 200),
            ("vast", "cheap", 200),
        ]
        # Only what the fallback cost is charged: it is free.
        assert (
            next(r for r in got if r.served_model == "cheap" and r.model == "chat").cost_micros == 0
        )
