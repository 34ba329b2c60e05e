"""The client API's answers and errors in OpenAI's and Anthropic's shapes, through gatewayd to sim replicas.

The model's source is a real (tiny) GGUF: its vocabulary of 259 tokens is read
with its other facts when the model is planned, and the gateway holds token
ids to it.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.agentd.tiny_gguf import write_tiny_llama_gguf
from tests.cluster_fixture import running_cluster, wait_for
from tests.gatewayd.gateway.openapi_check import schema_errors

VOCAB = 259


@pytest.fixture
async def served(tmp_path):
    """A cluster serving the sim model "chat" (source: a GGUF of 259 tokens), and a key."""
    weights = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("cpu-node")
        spec = ModelSpec(
            name="chat",
            source=str(weights),
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
        yield client, key.secret, base
        await client.close()


async def test_answers_validate_under_the_clients_model_name(served):
    client, secret, base = served
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {secret}"}) as http:
        chat = await http.post(
            f"{base}/chat/completions",
            json={"model": "chat", "messages": [{"role": "user", "content": "hi"}], "n": 2},
        )
        body = chat.json()
        assert schema_errors(body, "CreateChatCompletionResponse") == []
        # The sim takes n itself: two choices in one answer.
        assert [c["index"] for c in body["choices"]] == [0, 1] and body["model"] == "chat"
        text = await http.post(
            f"{base}/completions", json={"model": "chat", "prompt": [1, 2, 3], "max_tokens": 2}
        )
        assert schema_errors(text.json(), "CreateCompletionResponse") == []
        emb = await http.post(f"{base}/embeddings", json={"model": "chat", "input": "a b"})
        assert schema_errors(emb.json(), "CreateEmbeddingResponse") == []
        model = await http.get(f"{base}/models/chat")
        assert schema_errors(model.json(), "Model") == []
    retrieved = await client.models.retrieve("chat")
    assert retrieved.id == "chat"


async def test_token_ids_past_the_vocabulary_read_from_the_gguf_are_a_400_naming_the_field(
    served,
):
    client, _, _ = served
    with pytest.raises(openai.BadRequestError) as err:
        await client.embeddings.create(model="chat", input=[[1, 2], [3, VOCAB]])
    assert err.value.body["param"] == "input[1][1]"
    assert f"vocabulary of {VOCAB} tokens" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        await client.completions.create(model="chat", prompt=[VOCAB + 5], max_tokens=2)
    assert err.value.body["param"] == "prompt[0]"
    answer = await client.completions.create(model="chat", prompt=[VOCAB - 1], max_tokens=2)
    assert answer.choices[0].text


async def test_the_anthropic_sdk_counts_tokens_by_the_engines_tokenizer(served):
    _, secret, base = served
    claude = anthropic.AsyncAnthropic(base_url=base.removesuffix("/v1"), api_key=secret)
    counted = await claude.messages.count_tokens(
        model="chat", system="be brief", messages=[{"role": "user", "content": "one two three"}]
    )
    # The sim counts a token a word, over the system prompt and the messages.
    assert counted.input_tokens == 5
    with pytest.raises(anthropic.NotFoundError):
        await claude.messages.count_tokens(
            model="nope", messages=[{"role": "user", "content": "x"}]
        )
    await claude.close()
