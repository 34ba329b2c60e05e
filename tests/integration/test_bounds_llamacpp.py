"""OpenAI's bounds on a request, held at the gateway in front of a real llama.cpp server.

The issue's case, as a new user met it: ``POST /v1/completions`` with
``"logprobs": 213450922`` was answered 200 after 32 s with a 125 MB body of the
whole vocabulary's log-probabilities. Here the official openai SDK sends it
through gatewayd to the starter model served by real llama.cpp on this CPU.
"""

from __future__ import annotations

import os
import signal
import time

import openai
import pytest

from gatewayd.admin.views import model_spec
from llmgw.setup import starter
from tests.cluster_fixture import running_cluster, wait_for
from tests.gatewayd.gateway.openapi_check import schema_errors


@pytest.fixture
async def served(tmp_path, gemma3_270m_gguf):
    """The starter model on real llama.cpp, and an openai client with a key for it."""
    async with running_cluster(tmp_path) as cluster:
        try:
            await cluster.start_agent("cpu-node")
            model = starter.model(gemma3_270m_gguf)
            async with cluster.admin() as admin:
                await admin.put_model(model_spec(model), create_only=True)
                await admin.create_tenant("project", "acme/ml/bounds", parents=True)
                key = await admin.create_key("acme/ml/bounds")

                async def ready():
                    rs = (await admin.list_replicas(model.name)).replicas
                    return rs and rs[0].state == "ready"

                await wait_for(ready, attempts=1200, interval_s=0.1)
            base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
            client = openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
            yield model.name, client
            await client.close()
        finally:
            for r in cluster.server.reconciler.replicas.values():
                if r.pid:
                    try:
                        os.killpg(r.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass


async def test_logprobs_past_openais_bound_is_a_400_at_once_not_125_mb_from_llama_cpp(served):
    # Guards the 32 s, 125 MB answer: the engine was sent what OpenAI refuses.
    model, client = served
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as err:
        await client.completions.create(
            model=model, prompt="Hello", max_tokens=1, logprobs=213450922
        )
    assert time.monotonic() - started < 2
    body = err.value.response.json()
    assert schema_errors(body, "ErrorResponse") == []
    assert body["error"]["param"] == "logprobs" and err.value.param == "logprobs"
    assert "at most 5" in body["error"]["message"]

    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=1,
            logprobs=True,
            top_logprobs=50,
        )
    assert schema_errors(err.value.response.json(), "ErrorResponse") == []
    assert err.value.param == "top_logprobs"


async def test_logprobs_within_the_bound_are_answered_by_llama_cpp(served):
    model, client = served
    answer = await client.completions.create(
        model=model, prompt="Hello", max_tokens=2, logprobs=5, temperature=0
    )
    assert answer.choices[0].text is not None and answer.usage.completion_tokens > 0
    chat = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=2,
        logprobs=True,
        top_logprobs=20,
        temperature=0,
    )
    tops = chat.choices[0].logprobs.content[0].top_logprobs
    assert 0 < len(tops) <= 20
