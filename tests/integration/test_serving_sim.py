"""A model served end to end with the sim engine: placed, started, restarted, adopted."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
import openai
import pytest

from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for
from tests.engine_access import replica_headers


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        yield c


def sim_model(name: str = "sim-chat", replicas: int = 1) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        profiles=[ModelProfile(name="default", engine="sim", startup_timeout_s=60)],
        replicas_min=replicas,
        replicas_max=replicas,
        slots=1,
    )


async def replicas_of(cluster, model):
    async with cluster.admin() as admin:
        return list((await admin.list_replicas(model)).replicas)


async def ready_replica(cluster, model, *, not_pid=0):
    for r in await replicas_of(cluster, model):
        if r.state == "ready" and r.pid and r.pid != not_pid:
            return r
    return None


async def test_a_sim_model_is_placed_started_and_answers(cluster):
    await cluster.start_agent("cpu-node")
    async with cluster.admin() as admin:
        view = await admin.put_model(sim_model(), create_only=True)
        assert view.spec.name == "sim-chat"
    r = await wait_for(lambda: ready_replica(cluster, "sim-chat"), attempts=400)
    assert r.node_id == "cpu-node" and r.gpu_indexes == [] and r.endpoint
    states = [e.state for e in r.history]
    assert states[0] == "pending" and "placed" in states and states[-1] == "ready"
    # In through the replica's door, with the replica's own key (as the gateway goes).
    door_headers = replica_headers(cluster.paths.secrets_dir, r)
    async with httpx.AsyncClient(base_url=r.endpoint) as http:
        answer = await http.post(
            "/v1/chat/completions",
            json={
                "model": "sim-chat",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 5,
            },
            headers=door_headers,
        )
        assert answer.status_code == 200
        assert answer.json()["usage"]["completion_tokens"] == 5
        # The engine key is demanded.
        assert (await http.post("/v1/chat/completions", json={})).status_code == 401
    async with cluster.admin() as admin:
        model = await admin.get_model("sim-chat")
        assert model.state == "serving" and model.replicas_ready == 1


async def test_a_killed_engine_is_restarted_with_the_reason(cluster):
    await cluster.start_agent("cpu-node")
    async with cluster.admin() as admin:
        await admin.put_model(sim_model())
    first = await wait_for(lambda: ready_replica(cluster, "sim-chat"), attempts=400)
    os.kill(first.pid, signal.SIGKILL)
    again = await wait_for(
        lambda: ready_replica(cluster, "sim-chat", not_pid=first.pid), attempts=600
    )
    assert again.replica_id == first.replica_id and again.restarts == 1
    reasons = " ".join(e.reason for e in again.history if e.state == "failed")
    assert "signal" in reasons or "SIGKILL" in reasons or "killed" in reasons


async def test_an_agent_restart_adopts_the_engine_without_restarting_it(cluster):
    await cluster.start_agent("cpu-node")
    async with cluster.admin() as admin:
        await admin.put_model(sim_model())
    first = await wait_for(lambda: ready_replica(cluster, "sim-chat"), attempts=400)
    await cluster.stop_agents()
    await cluster.start_agent("cpu-node")

    async def adopted():
        r = await ready_replica(cluster, "sim-chat")
        if r is not None and any("adopted" in e.reason for e in r.history):
            return r
        return None

    r = await wait_for(adopted, attempts=400)
    assert r.pid == first.pid and r.restarts == 0
    os.kill(r.pid, signal.SIGTERM)  # leave nothing behind


async def test_a_model_that_needs_gpus_is_refused_with_every_nodes_reason(cluster):
    await cluster.start_agent("cpu-node")

    async def node_ready():
        async with cluster.admin() as admin:
            nodes = (await admin.list_nodes()).nodes
        return [n.state for n in nodes] == ["ready"]

    await wait_for(node_ready, attempts=200)
    spec = sim_model("big")
    spec.profiles[0].gpu = GpuNeed(count=2, min_memory_bytes=80 * 2**30)
    async with cluster.admin() as admin:
        await admin.put_model(spec)

        async def pending():
            rs = await replicas_of(cluster, "big")
            return rs if rs and rs[0].state == "pending" and rs[0].reason else None

        await wait_for(pending, attempts=200)
        explained = await admin.explain_placement("big")
        assert explained.placement is None
        assert explained.refused == "no node can run it: 1 without a suitable GPU"
        assert [(n.node_id, n.reason) for n in explained.reasons] == [
            ("cpu-node", "has no GPU (no NVIDIA driver)")
        ]
        rs = await wait_for(lambda: _with_reason(cluster, "big", explained.refused), attempts=400)
        assert rs[0].state == "pending"


async def _with_reason(cluster, model, reason):
    rs = await replicas_of(cluster, model)
    return rs if rs and rs[0].reason == reason else None


async def test_a_replicas_engine_output_is_fetched_from_its_node(cluster):
    await cluster.start_agent("cpu-node")
    async with cluster.admin() as admin:
        await admin.put_model(sim_model())
    r = await wait_for(lambda: ready_replica(cluster, "sim-chat"), attempts=400)

    async def logged():
        # The node follows the engine's output file a moment behind it.
        async with cluster.admin() as admin:
            logs = await admin.replica_logs(r.replica_id, 20)
        assert logs.replica_id == r.replica_id
        return any("serving sim-chat" in line for line in logs.lines)

    await wait_for(logged, attempts=100)
    os.kill(r.pid, signal.SIGTERM)


@pytest.mark.parametrize("flag", ["--trust-remote-code", "--trust_remote_code", "--trust-rem"])
async def test_a_refused_engine_flag_is_refused_when_the_model_is_added(cluster, flag):
    from llmgw.errors import UsageError

    spec = sim_model()
    spec.profiles[0].engine = "vllm"
    spec.profiles[0].args = [flag]
    async with cluster.admin() as admin:
        with pytest.raises(UsageError, match="refused"):
            await admin.put_model(spec)
        assert not (await admin.list_models()).models


async def test_a_context_change_replaces_replicas_one_at_a_time_new_before_old(cluster):
    await cluster.start_agent("cpu-node")
    async with cluster.admin() as admin:
        await admin.put_model(sim_model(replicas=2))

    async def two_ready():
        rs = [r for r in await replicas_of(cluster, "sim-chat") if r.state == "ready"]
        return rs if len(rs) == 2 else None

    old = {r.replica_id for r in await wait_for(two_ready, attempts=400)}
    async with cluster.admin() as admin:
        view = await admin.set_model_context("sim-chat", 1024)
        assert view.spec.context_length == 1024
    seen_ready_counts = []

    async def all_new():
        rs = await replicas_of(cluster, "sim-chat")
        ready = [r for r in rs if r.state == "ready"]
        seen_ready_counts.append(len(ready))
        new = [r for r in ready if r.replica_id not in old]
        return new if len(new) == 2 and len(ready) == 2 else None

    await wait_for(all_new, attempts=800)
    # Never fewer than the two ready replicas while it rolled.
    assert min(seen_ready_counts) >= 2
    for r in cluster.server.reconciler.replicas.values():
        if r.pid and r.state == "ready":
            os.kill(r.pid, signal.SIGTERM)


async def test_a_replica_not_ready_by_its_deadline_fails_saying_so_and_is_retried(cluster):
    await cluster.start_agent("cpu-node")
    spec = sim_model("slow")
    # The simulator takes 30 s to load; the profile gives it 2.
    spec.profiles[0].args = ["--load-ms", "30000"]
    spec.profiles[0].startup_timeout_s = 2
    async with cluster.admin() as admin:
        await admin.put_model(spec)

    async def failed():
        for r in await replicas_of(cluster, "slow"):
            for e in r.history:
                if e.state == "failed":
                    return e
        return None

    event = await wait_for(failed, attempts=400)
    assert "health" in event.reason or "deadline" in event.reason or "not ready" in event.reason
    assert "restarting in" in event.reason


async def test_replicas_of_a_node_lost_past_the_grace_are_placed_elsewhere(tmp_path):
    async with running_cluster(tmp_path, lost_grace_s=1.0) as cluster:
        await cluster.start_agent("node-a")
        async with cluster.admin() as admin:
            await admin.put_model(sim_model())
        first = await wait_for(lambda: ready_replica(cluster, "sim-chat"), attempts=400)
        assert first.node_id == "node-a"
        await cluster.start_agent("node-b")
        # node-a goes away (its agent stops; its engine is gone with the machine).
        _, stop, task = cluster.agents[0]
        stop.set()
        await task
        os.killpg(first.pid, signal.SIGKILL)

        async def moved():
            r = await ready_replica(cluster, "sim-chat")
            return r if r is not None and r.node_id == "node-b" else None

        r = await wait_for(moved, attempts=600)
        reasons = " ".join(e.reason for e in r.history)
        assert "node node-a lost" in reasons


async def test_a_key_rotation_refuses_the_old_key_and_no_answer_under_way_fails(cluster):
    # Guards: one cluster-wide engine key, never rotated, opened every engine to
    # whoever saw one request; now each replica has its own, and it can be replaced.
    await cluster.start_agent("cpu-node")
    spec = sim_model("sim-rotate")
    # 250 tokens 40 ms apart: a 10 s answer, beside a rotation's 3 s grace.
    spec.profiles[0].args = ["--itl-ms", "40", "--tokens", "250"]
    async with cluster.admin() as admin:
        await admin.put_model(spec, create_only=True)
        await admin.create_tenant("project", "acme/ml/rotate", parents=True)
        api_key = await admin.create_key("acme/ml/rotate", name="rotate")
    r = await wait_for(lambda: ready_replica(cluster, "sim-rotate"), attempts=400)
    old = replica_headers(cluster.paths.secrets_dir, r)
    ask = {"model": "sim-rotate", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    async with httpx.AsyncClient(base_url=r.endpoint, timeout=30) as door:
        assert (await door.post("/v1/chat/completions", json=ask, headers=old)).status_code == 200

        # A long answer streams through the gateway while the keys change under it.
        base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
        async with openai.AsyncOpenAI(base_url=base, api_key=api_key.secret, max_retries=0) as sdk:
            stream = await sdk.chat.completions.create(
                model="sim-rotate",
                messages=[{"role": "user", "content": "a long one"}],
                max_tokens=250,
                stream=True,
            )
            chunks = stream.__aiter__()
            first = await chunks.__anext__()

            async def rest() -> list:
                return [first] + [c async for c in chunks]

            reading = asyncio.create_task(rest())
            async with cluster.admin() as admin:
                rotated = await admin.rotate_engine_keys()
            assert list(rotated.rotated) == [r.replica_id] and rotated.epoch == 1, rotated
            assert not reading.done()  # the old key is refused by now, the answer still coming
            got = await reading
            assert not reading.exception()
            words = [
                c.choices[0].delta.content for c in got if c.choices and c.choices[0].delta.content
            ]
            assert len(words) == 250
            assert got[-1].choices[0].finish_reason == "length"

            # The old key is refused at the door; the new one, and the gateway, go on.
            refused = await door.post("/v1/chat/completions", json=ask, headers=old)
            assert refused.status_code == 401
            new = replica_headers(cluster.paths.secrets_dir, r, epoch=1)
            assert (
                await door.post("/v1/chat/completions", json=ask, headers=new)
            ).status_code == 200
            after = await sdk.chat.completions.create(
                model="sim-rotate", messages=[{"role": "user", "content": "hi"}], max_tokens=3
            )
            assert after.usage.completion_tokens == 3
