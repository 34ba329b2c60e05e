"""Limits down the tree, budgets from model prices, usage rows and sums, admission bands —
through a real gatewayd and sim replicas, with the official SDKs as clients."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from gatewayd.gateway.policy.pricing import cost_micros
from llmgw.catalog.price import Price
from llmgw.config import BandConfig
from proto.llmgw.v1 import LimitsView, ModelPrice, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

PRICE = Price(prompt_per_1k=1000, completion_per_1k=2000)
PROJECT = "Acme/ml/search"


def _spec(name="chat", slots=4, args=()) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        replicas_min=1,
        replicas_max=1,
        slots=slots,
        profiles=[
            ModelProfile(name="default", engine="sim", startup_timeout_s=60, args=list(args))
        ],
        price=ModelPrice(
            prompt_per_thousand=PRICE.prompt_per_1k,
            completion_per_thousand=PRICE.completion_per_1k,
        ),
    )


async def _serve(cluster, spec: ModelSpec):
    await cluster.start_agent("cpu-node")
    async with cluster.admin() as admin:
        await admin.put_model(spec)
        await admin.create_tenant("project", PROJECT, parents=True)

        async def ready():
            rs = (await admin.list_replicas(spec.name)).replicas
            return rs and rs[0].state == "ready"

        await wait_for(ready, attempts=400)
    return f"http://127.0.0.1:{cluster.server.ports['http']}/v1"


def _client(base, secret) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0)


async def _ask(client, text="hello there", max_tokens=5):
    return await client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": text}], max_tokens=max_tokens
    )


async def test_a_budget_of_one_micro_unit_is_spent_by_the_first_priced_request(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        base = await _serve(cluster, _spec())
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT, budget_month_micros=1)
        client = _client(base, key.secret)
        first = await _ask(client)
        assert cost_micros(PRICE, first.usage.prompt_tokens, first.usage.completion_tokens) > 1
        with pytest.raises(openai.RateLimitError) as err:
            await _ask(client)
        assert err.value.body["code"] == "budget_exceeded"
        assert f"key {key.key_id}: its monthly budget" in err.value.message
        # Waiting will not help before the month turns: no Retry-After.
        assert "retry-after" not in err.value.response.headers
        await client.close()


async def test_a_projects_rate_is_shared_by_its_keys_and_named_when_it_refuses(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        base = await _serve(cluster, _spec())
        async with cluster.admin() as admin:
            await admin.set_limits(LimitsView(scope=PROJECT, rpm=3))
            a = await admin.create_key(PROJECT)
            b = await admin.create_key(PROJECT)
        ca, cb = _client(base, a.secret), _client(base, b.secret)
        await _ask(ca)
        await _ask(cb)
        await _ask(ca)
        with pytest.raises(openai.RateLimitError) as err:
            await _ask(cb)
        assert f"project {PROJECT}: 3 requests per minute" in err.value.message
        assert int(err.value.response.headers["retry-after"]) >= 1
        await ca.close()
        await cb.close()


async def test_usage_rows_and_sums_match_the_requests_sent(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        base = await _serve(cluster, _spec())
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
        client = _client(base, key.secret)
        answers = [await _ask(client, f"question {i}", max_tokens=3 + i) for i in range(3)]
        prompt = sum(a.usage.prompt_tokens for a in answers)
        completion = sum(a.usage.completion_tokens for a in answers)
        # A stream whose client did not ask for usage is still counted.
        stream = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
        chunks = [c async for c in stream]
        assert all(c.usage is None for c in chunks)  # the usage chunk was not relayed
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "x"}]
            )
        await client.close()

        async with cluster.admin() as admin:

            async def flushed():
                groups = (await admin.usage(["model", "status"])).groups
                return sum(g.requests for g in groups) == 5 and groups

            groups = {(g.group["model"], g.group["status"]): g for g in await wait_for(flushed)}
            ok = groups[("chat", "200")]
            assert ok.requests == 4 and ok.errors == 0
            assert ok.completion_tokens == completion + 4
            assert ok.prompt_tokens > prompt  # the stream's prompt too
            assert ok.cost_micros == sum(
                cost_micros(PRICE, a.usage.prompt_tokens, a.usage.completion_tokens)
                for a in answers
            ) + cost_micros(PRICE, ok.prompt_tokens - prompt, 4)
            assert ok.ttft_ms_avg > 0  # the stream's time to first token
            # A name the client made up is stored as asked, answered 404, counted an error.
            assert groups[("nope", "404")].errors == 1
            rows = [r async for r in admin.export_usage()]
            assert len(rows) == 5 and {r.key_id for r in rows} == {key.key_id}
            assert {r.project for r in rows} == {PROJECT}
            served = [r for r in rows if r.status == 200]
            assert all(r.replica and r.served_model == "chat" for r in served)


async def test_the_metrics_port_counts_tokens_ttft_and_queue_depth(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        base = await _serve(cluster, _spec())
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
        client = _client(base, key.secret)
        await _ask(client, max_tokens=6)
        stream = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
        )
        _ = [c async for c in stream]
        await client.close()
        async with httpx.AsyncClient() as http:
            page = (
                await http.get(f"http://127.0.0.1:{cluster.server.ports['metrics']}/metrics")
            ).text
        assert 'llmgw_tokens_total{kind="completion",model="chat"} 9.0' in page
        assert 'llmgw_time_to_first_token_seconds_count{model="chat"} 2.0' in page
        assert 'llmgw_admission_queue_depth{band="default"} 0.0' in page
        assert 'llmgw_replicas_ready{model="chat"} 1.0' in page
        assert "llmgw_replica_up{" in page


def _one_slot_no_queue(cfg):
    cfg.router.admission.bands = [BandConfig(name="default", max_queue=0)]


async def test_a_full_band_queue_answers_503_with_retry_after(tmp_path):
    async with running_cluster(tmp_path, configure=_one_slot_no_queue) as cluster:
        # One slot, and each answer takes a while: the second request finds no room.
        base = await _serve(cluster, _spec(slots=1, args=["--itl-ms", "100"]))
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
        client = _client(base, key.secret)
        slow = asyncio.create_task(_ask(client, max_tokens=20))
        for _ in range(200):
            if cluster.server.gateway.bands.in_flight("default"):
                break
            await asyncio.sleep(0.01)
        with pytest.raises(openai.InternalServerError) as err:
            await _ask(client)
        assert err.value.status_code == 503 and err.value.body["code"] == "queue_full"
        assert err.value.response.headers["retry-after"] == "10"
        assert (await slow).usage.completion_tokens == 20
        await client.close()
