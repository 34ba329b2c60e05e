"""/v1/responses through a real gatewayd and sim replicas: metered as chat is, refused in words,
and stored only for a project that keeps responses — with the official openai SDK as client."""

from __future__ import annotations

import httpx
import openai
import pytest

from gatewayd.gateway.policy.pricing import cost_micros
from tests.cluster_fixture import running_cluster, wait_for
from tests.integration.gateway.test_gateway_accounting import PRICE, PROJECT, _serve, _spec


async def test_responses_are_metered_and_charged_as_chat_answers_are(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        base = await _serve(cluster, _spec())
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
        client = openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
        whole = await client.responses.create(
            model="chat", input="hello there", max_output_tokens=5
        )
        events = [e async for e in await client.responses.create(
            model="chat", input="hi", max_output_tokens=4, stream=True)]  # fmt: skip
        await client.close()
        streamed = events[-1].response
        assert whole.usage.output_tokens == 5 and streamed.usage.output_tokens == 4
        assert whole.output_text and streamed.output_text

        async with cluster.admin() as admin:

            async def flushed():
                groups = (await admin.usage(["model", "status"])).groups
                return sum(g.requests for g in groups) == 2 and groups

            (ok,) = await wait_for(flushed)
            assert ok.requests == 2 and ok.completion_tokens == 9
            assert ok.prompt_tokens == whole.usage.input_tokens + streamed.usage.input_tokens
            assert ok.cost_micros == cost_micros(PRICE, ok.prompt_tokens, 9)
            assert ok.ttft_ms_avg > 0  # the stream's first token was timed
            rows = [r async for r in admin.export_usage()]
            assert {(r.key_id, r.project, r.status) for r in rows} == {(key.key_id, PROJECT, 200)}


async def test_a_request_the_gateway_cannot_serve_is_refused_naming_the_field(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        base = await _serve(cluster, _spec())
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
        client = openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="chat", input="x", tools=[{"type": "web_search"}])
        assert refused.value.body["param"] == "tools[0].type"
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="nope", input="x")
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="chat", input="x", store=True)
        assert refused.value.body["code"] == "retention_off"
        await client.close()
        headers = {"authorization": f"Bearer {key.secret}"}
        async with httpx.AsyncClient(base_url=base, headers=headers) as http:
            assert (await http.get("/responses")).status_code == 405
            assert (await http.post("/responses", content=b"{")).json()["error"]["code"] == (
                "invalid_json"
            )
            # Without a key nothing is said about stored responses.
            assert (await httpx.AsyncClient().get(f"{base}/responses/resp_1")).status_code == 401


async def test_a_project_that_keeps_responses_reads_them_back_until_it_stops(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        base = await _serve(cluster, _spec())
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
            await admin.set_retention(PROJECT, 3600)
        client = openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
        first = await client.responses.create(
            model="chat", input="My name is Ada.", store=True, max_output_tokens=3
        )
        events = [e async for e in await client.responses.create(
            model="chat", input="And mine?", previous_response_id=first.id, store=True,
            max_output_tokens=3, stream=True)]  # fmt: skip
        second = events[-1].response
        assert (await client.responses.retrieve(second.id)).output_text == second.output_text
        items = await client.responses.input_items.list(second.id, order="asc")
        assert [i.content[0].text for i in items.data] == ["And mine?"]

        async with cluster.admin() as admin:
            view = await admin.set_retention(PROJECT, 0)
            assert view.retain_responses_s == 0
            await admin.set_retention(PROJECT, 3600)
        # Turning retention off forgot what was kept.
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(first.id)
        await client.close()
