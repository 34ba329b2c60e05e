"""The client API with the official openai SDK, through gatewayd to sim replicas."""

from __future__ import annotations

import openai
import pytest

from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for


@pytest.fixture
async def served(tmp_path):
    """A cluster serving the sim model "chat", and a key for it."""
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("cpu-node")
        spec = ModelSpec(
            name="chat",
            source="/models/none.gguf",
            replicas_min=1,
            replicas_max=1,
            slots=4,
            profiles=[ModelProfile(name="default", engine="sim", startup_timeout_s=60)],
        )
        async with cluster.admin() as admin:
            await admin.put_model(spec)
            await admin.create_tenant("project", "acme/ml/search", parents=True)
            key = await admin.create_key("acme/ml/search", name="tests")

            async def ready():
                rs = (await admin.list_replicas("chat")).replicas
                return rs and rs[0].state == "ready"

            await wait_for(ready, attempts=400)
        base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
        client = openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
        yield cluster, client, key, base
        await client.close()


async def test_the_openai_sdk_lists_models_and_gets_answers_streamed_or_not(served):
    _, client, key, _ = served
    assert key.secret.startswith("llmgw-") and key.prefix in key.secret
    models = await client.models.list()
    assert [(m.id, m.model_extra["loaded"]) for m in models.data] == [("chat", True)]

    raw = await client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "hello there"}], max_tokens=5
    )
    assert float(raw.headers["x-llmgw-overhead-ms"]) >= 0
    answer = raw.parse()
    assert answer.choices[0].message.content and answer.usage.completion_tokens == 5

    chunks = []
    stream = await client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        chunks.append(chunk)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage.completion_tokens == 4

    emb = await client.embeddings.create(model="chat", input=["a", "b"])
    assert len(emb.data) == 2 and emb.data[0].embedding


async def test_bad_keys_and_unknown_models_raise_the_sdks_own_errors(served):
    cluster, client, key, base = served
    bad = openai.AsyncOpenAI(base_url=base, api_key="llmgw-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await bad.models.list()
    await bad.close()
    with pytest.raises(openai.NotFoundError) as err:
        await client.chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}]
        )
    assert err.value.body["code"] == "model_not_found"

    async with cluster.admin() as admin:
        await admin.revoke_key(key.key_id)
    with pytest.raises(openai.AuthenticationError, match="revoked"):
        await client.models.list()


async def test_a_key_limited_to_some_models_is_refused_others(served):
    cluster, _, _, base = served
    async with cluster.admin() as admin:
        key = await admin.create_key("acme/ml/search", models=["other"])
    limited = openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
    assert [m.id for m in (await limited.models.list()).data] == []
    with pytest.raises(openai.PermissionDeniedError):
        await limited.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "x"}]
        )
    await limited.close()


async def test_malformed_requests_are_refused_naming_the_field(served):
    import httpx

    _, _, key, base = served
    auth = {"authorization": f"Bearer {key.secret}"}
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.post("/chat/completions", content=b"{not json", headers=auth)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        r = await http.post("/chat/completions", json={"model": 7}, headers=auth)
        assert r.status_code == 400 and r.json()["error"]["param"] == "model"
        r = await http.post(
            "/chat/completions", json={"model": "chat", "stream": "yes"}, headers=auth
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "stream"
        r = await http.get("/chat/completions", headers=auth)
        assert r.status_code == 405
        r = await http.post("/chat/completions", json={"model": "chat"})
        assert r.status_code == 401 and "x-llmgw-overhead-ms" in r.headers


async def test_a_key_limited_to_5_requests_a_minute_gets_the_6th_refused(served):
    cluster, _, _, base = served
    async with cluster.admin() as admin:
        key = await admin.create_key("acme/ml/search", rpm=5)
        assert key.rpm == 5
    limited = openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
    for _ in range(5):
        await limited.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "x"}], max_tokens=1
        )
    with pytest.raises(openai.RateLimitError) as err:
        await limited.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "x"}], max_tokens=1
        )
    assert int(err.value.response.headers["retry-after"]) >= 1
    assert "5 requests per minute" in err.value.message
    await limited.close()


async def test_the_anthropic_sdk_creates_and_streams_a_message(served):
    import anthropic

    _, _, key, base = served
    client = anthropic.AsyncAnthropic(
        base_url=base.removesuffix("/v1"), api_key=key.secret, max_retries=0
    )
    message = await client.messages.create(
        model="chat", max_tokens=6, messages=[{"role": "user", "content": "Hello"}]
    )
    assert message.role == "assistant" and message.content[0].type == "text"
    assert message.content[0].text and message.usage.output_tokens == 6
    assert message.stop_reason == "max_tokens"

    text = []
    async with client.messages.stream(
        model="chat", max_tokens=4, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        async for delta in stream.text_stream:
            text.append(delta)
        final = await stream.get_final_message()
    assert "".join(text) == final.content[0].text and final.usage.output_tokens == 4

    with pytest.raises(anthropic.AuthenticationError):
        bad = anthropic.AsyncAnthropic(
            base_url=base.removesuffix("/v1"), api_key="nope", max_retries=0
        )
        await bad.messages.create(
            model="chat", max_tokens=1, messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(
            model="nope", max_tokens=1, messages=[{"role": "user", "content": "x"}]
        )
    await client.close()
    import httpx

    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.post(
            "/messages",
            headers={"x-api-key": key.secret},
            json={
                "model": "chat",
                "max_tokens": "many",
                "messages": [{"role": "user", "content": "x"}],
            },
        )
    assert r.status_code == 400
    assert r.json()["type"] == "error" and "max_tokens" in r.json()["error"]["message"]


async def test_metrics_count_requests_by_catalog_model_and_status_only(served):
    import httpx

    cluster, client, _, _ = served
    await client.chat.completions.create(
        model="chat", max_tokens=1, messages=[{"role": "user", "content": "x"}]
    )
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(
            model="made-up-by-a-client", max_tokens=1, messages=[{"role": "user", "content": "x"}]
        )
    metrics_url = f"http://127.0.0.1:{cluster.server.ports['metrics']}/metrics"
    async with httpx.AsyncClient() as http:
        text = (await http.get(metrics_url)).text
    assert 'llmgw_requests_total{model="chat",status="200"} 1.0' in text
    assert 'llmgw_requests_total{model="unknown",status="404"} 1.0' in text
    assert "made-up-by-a-client" not in text
    assert "llmgw_overhead_seconds_bucket" in text
    async with cluster.admin() as admin:
        status = await admin.status()
    assert status.gateway_url == f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
