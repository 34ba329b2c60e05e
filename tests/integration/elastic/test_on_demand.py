"""Models that start on demand (min 0): the first request is held while a replica starts and
is answered as usual; an idle model gives its cards back after evict_after_idle and starts
again on the next request; one that cannot be placed is refused with 503, Retry-After and
the reason. Through a real gatewayd and agent on a fake GPU inventory, sim engines as real
processes, and once with the real llama.cpp starter on CPU; the openai SDK as client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import pytest

from gatewayd.admin.views import model_spec
from llmgw.present.nodefmt import gpu_summary
from llmgw.scaling import OnDemandConfig
from llmgw.setup import starter
from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

GIB = 2**30
PROJECT = "Acme/ml/ondemand"


def _spec(name: str, per_card_gib: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        replicas_min=0,
        replicas_max=1,
        slots=1,
        profiles=[
            ModelProfile(
                name="default",
                engine="sim",
                gpu=GpuNeed(count=1, min_memory_bytes=per_card_gib * GIB),
                startup_timeout_s=60,
            )
        ],
    )


def _quick_eviction(cfg) -> None:
    cfg.on_demand = OnDemandConfig(evict_after_idle_s=2, min_lifetime_s=0)


async def _active(admin, model: str) -> list:
    return [r for r in (await admin.list_replicas(model)).replicas if r.state != "stopped"]


async def _cards(admin, node: str) -> str:
    return gpu_summary(await admin.get_node(node))


def _client(cluster, key) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{cluster.server.ports['http']}/v1",
        api_key=key.secret,
        max_retries=0,
    )


def _ask(gpt: openai.AsyncOpenAI, model: str):
    return gpt.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=8
    )


async def test_an_on_demand_model_starts_for_its_first_request_and_gives_its_card_back(tmp_path):
    async with running_cluster(tmp_path, configure=_quick_eviction) as cluster:
        await cluster.start_agent("l4-box", fixture="l4_24g_x4")
        await cluster.wait_nodes_ready("l4-box")
        async with cluster.admin() as admin:
            await admin.put_model(_spec("chat", 20))
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
            view = await admin.get_model("chat")
            assert (view.state, view.replicas_desired) == ("on demand", 0)
            assert await _active(admin, "chat") == []
            assert (await _cards(admin, "l4-box")).endswith("(all free)")

            gpt = _client(cluster, key)
            answer = await _ask(gpt, "chat")
            assert answer.choices[0].message.content
            assert answer.model == "chat"
            (r,) = await _active(admin, "chat")
            assert r.state == "ready"
            assert r.history[0].reason.startswith(
                "waiting to be placed (started on demand: 1 request waiting"
            )
            assert (await _cards(admin, "l4-box")).endswith("(3 free)")

            # Idle for evict_after_idle: the replica is stopped and its card shown free.
            async def evicted():
                return not await _active(admin, "chat") or None

            await wait_for(evicted, attempts=600, interval_s=0.1)
            assert (await _cards(admin, "l4-box")).endswith("(all free)")
            rc, out, err = await cluster.ctl("nodes")
            assert rc == 0, err
            (line,) = [ln for ln in out.splitlines() if " l4-box " in ln]
            assert "(all free)" in line, out
            assert (await admin.get_model("chat")).state == "on demand"
            scale = [w.message for w in (await admin.warnings(600)).warnings if w.kind == "scale"]
            assert any("1 → 0 replicas: stopped on demand: no request for" in m for m in scale)

            # The next request starts it again.
            again = await _ask(gpt, "chat")
            assert again.choices[0].message.content
            (r2,) = await _active(admin, "chat")
            assert r2.replica_id != r.replica_id
            await gpt.close()


async def test_an_on_demand_model_that_cannot_be_placed_is_refused_with_its_reason(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("l4-box", fixture="l4_24g_x4")
        await cluster.wait_nodes_ready("l4-box")
        async with cluster.admin() as admin:
            await admin.put_model(_spec("huge", 200))
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
        gpt = _client(cluster, key)
        with pytest.raises(openai.APIStatusError) as err:
            await _ask(gpt, "huge")
        assert err.value.status_code == 503
        assert err.value.response.headers["retry-after"] == "15"
        body = err.value.body
        assert body["code"] == "no_capacity"
        assert "cannot be started now: no node can run it" in body["message"]
        assert "without a suitable GPU" in body["message"]
        assert "llmgw ctl explain-placement huge" in body["message"]
        await gpt.close()


async def test_the_llama_cpp_starter_on_demand_answers_its_first_request(
    tmp_path, gemma3_270m_gguf
):
    async with running_cluster(tmp_path, configure=_quick_eviction) as cluster:
        await cluster.start_agent("cpu-node")
        model = starter.model(gemma3_270m_gguf)
        # Reserving one core, which llama-server is given as its threads.
        profile = model.profiles[0].model_copy(update={"cores": 1})
        model = model.model_copy(
            update={"replicas_min": 0, "replicas_max": 1, "profiles": [profile]}
        )
        async with cluster.admin() as admin:
            await admin.put_model(model_spec(model), create_only=True)
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
            assert await _active(admin, model.name) == []
        gpt = _client(cluster, key)

        async def hello():
            return await gpt.chat.completions.create(
                model=model.name,
                messages=[{"role": "user", "content": "Say hello"}],
                max_tokens=8,
                temperature=0,
            )

        answer = await hello()
        assert answer.choices[0].message.content
        assert answer.usage.completion_tokens > 0
        async with cluster.admin() as admin:
            (r,) = await _active(admin, model.name)
            assert r.cores == 1
            argv = Path(f"/proc/{r.pid}/cmdline").read_bytes().decode().split("\0")
            assert argv[argv.index("--threads") + 1] == "1"
            assert argv[argv.index("--threads-batch") + 1] == "1"
            # llama.cpp's own words: its thread pool has the one thread.
            logs = await admin.replica_logs(r.replica_id, 400)
            assert any("n_threads = 1" in line for line in logs.lines), logs.lines[-20:]

            # Idle for evict_after_idle: llama-server is stopped, its cores given back.
            async def evicted():
                return not await _active(admin, model.name) or None

            await wait_for(evicted, attempts=600, interval_s=0.1)
            assert (await admin.get_node("cpu-node")).cores_taken == 0
            # The next request starts it again.
            again = await hello()
            assert again.choices[0].message.content
            (r2,) = await _active(admin, model.name)
            assert r2.replica_id != r.replica_id and r2.pid != r.pid
        await gpt.close()


def _one_card_churn(cfg) -> None:
    cfg.on_demand = OnDemandConfig(evict_after_idle_s=600, min_lifetime_s=0)


async def test_on_demand_models_take_turns_on_one_card_and_a_busy_one_finishes_first(tmp_path):
    async with running_cluster(tmp_path, configure=_one_card_churn) as cluster:
        await cluster.start_agent("one-card", fixture="rtx6000_24g_x1")
        await cluster.wait_nodes_ready("one-card")
        slow = ["--ttft-ms", "20", "--itl-ms", "20", "--tokens", "50"]
        async with cluster.admin() as admin:
            for name in ("a", "b"):
                spec = _spec(name, 20)
                spec.profiles[0].args = slow
                await admin.put_model(spec)
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
            gpt = _client(cluster, key)
            assert (await _ask(gpt, "a")).model == "a"
            (first_a,) = await _active(admin, "a")

            # b is asked for while a streams: b waits, a's answer finishes, then a's card is b's.
            stream = await gpt.chat.completions.create(
                model="a", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            chunks = [await anext(stream)]
            asking_b = asyncio.create_task(_ask(gpt, "b"))
            chunks += [c async for c in stream]
            assert chunks[-1].choices[0].finish_reason == "stop"
            answer_b = await asking_b
            assert answer_b.model == "b" and answer_b.choices[0].message.content

            a_history = [
                e.reason
                for r in (await admin.list_replicas("a")).replicas
                if r.replica_id == first_a.replica_id
                for e in r.history
            ]
            assert any(
                "given over to b, asked for now: this on-demand model is idle" in h
                for h in a_history
            ), a_history
            assert await _active(admin, "a") == []
            # And back: b is idle now, so a takes the card again.
            assert (await _ask(gpt, "a")).model == "a"
            assert await _active(admin, "b") == [] or all(
                r.state == "draining" for r in await _active(admin, "b")
            )
            await gpt.close()
