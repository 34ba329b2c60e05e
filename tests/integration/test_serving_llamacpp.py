"""A real model served by real llama.cpp on this machine's CPU, through the whole path."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from gatewayd.admin.views import model_spec
from llmgw.setup import starter
from tests.cluster_fixture import running_cluster, wait_for
from tests.engine_access import replica_headers


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        yield c
        for r in c.server.reconciler.replicas.values():
            if r.pid:
                try:
                    os.killpg(r.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


async def test_the_starter_model_is_served_on_cpu_by_llama_cpp_and_answers(
    cluster, gemma3_270m_gguf
):
    await cluster.start_agent("cpu-node")
    model = starter.model(gemma3_270m_gguf)
    async with cluster.admin() as admin:
        await admin.put_model(model_spec(model), create_only=True)

    async def ready():
        async with cluster.admin() as admin:
            rs = (await admin.list_replicas(model.name)).replicas
        return rs[0] if rs and rs[0].state == "ready" else None

    r = await wait_for(ready, attempts=1200, interval_s=0.1)
    assert r.node_id == "cpu-node" and not r.gpu_indexes and r.endpoint
    # In through the replica's door, with the replica's own key (as the gateway goes).
    door_headers = replica_headers(cluster.paths.secrets_dir, r)
    async with httpx.AsyncClient(base_url=r.endpoint, timeout=60) as http:
        answer = await http.post(
            "/v1/chat/completions",
            headers=door_headers,
            json={
                "model": model.name,
                "max_tokens": 8,
                "temperature": 0,
                "messages": [{"role": "user", "content": "Say hello"}],
            },
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["usage"]["completion_tokens"] > 0
        assert body["choices"][0]["message"]["content"]
        # Without the engine key the replica refuses.
        assert (await http.post("/v1/chat/completions", json={})).status_code == 401


async def test_a_context_past_the_trained_one_is_refused(cluster, gemma3_270m_gguf):
    from llmgw.errors import UsageError

    await cluster.start_agent("cpu-node")

    async def node_ready():
        async with cluster.admin() as admin:
            return [n.state for n in (await admin.list_nodes()).nodes] == ["ready"]

    await wait_for(node_ready, attempts=200)
    model = starter.model(gemma3_270m_gguf)
    model = model.model_copy(update={"replicas_min": 0, "replicas_max": 0})
    async with cluster.admin() as admin:
        await admin.put_model(model_spec(model))
        with pytest.raises(UsageError, match="past the model's trained 32768"):
            await admin.set_model_context(model.name, 65536)
        assert (await admin.get_model(model.name)).spec.context_length == starter.CONTEXT


async def test_an_embeddings_request_with_nulls_the_description_allows_is_answered(
    cluster, gemma3_270m_gguf
):
    # OpenAI's description lets encoding_format and user be null; llama-server took a
    # null encoding_format for a 500. Through the gateway, it is answered.
    await cluster.start_agent("cpu-node")
    model = starter.model(gemma3_270m_gguf)
    async with cluster.admin() as admin:
        await admin.put_model(model_spec(model), create_only=True)
        await admin.create_tenant("project", "acme/ml/embed", parents=True)
        key = await admin.create_key("acme/ml/embed")

        async def ready():
            rs = (await admin.list_replicas(model.name)).replicas
            return rs and rs[0].state == "ready"

        await wait_for(ready, attempts=1200, interval_s=0.1)
    base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        r = await http.post(
            "/embeddings",
            headers={"authorization": f"Bearer {key.secret}"},
            json={
                "model": model.name,
                "input": "the quick brown fox",
                "encoding_format": None,
                "user": None,
            },
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["data"][0]["embedding"]
