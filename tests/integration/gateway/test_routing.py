"""Routing for real: sessions stick, a dying replica loses no request, outside keys fail over.

Through gatewayd with the official openai SDK, to sim replicas an agent runs
and to a sim started on its own as an outside provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

import aiohttp
import httpx
import openai
import pytest

from gatewayd.gateway.metering.scrape import Scraper, parse_metrics
from gatewayd.gateway.routing.router import Target
from llmgw.errors import UsageError
from proto.llmgw.v1 import ExternalKey, ExternalSource, ModelProfile, ModelSpec, PlanModelRequest
from tests.cluster_fixture import running_cluster, wait_for
from tests.engine_access import replica_headers


def success_count(metrics_text: str) -> float:
    """Requests an engine finished, by the sim's (vLLM's) own counter."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("vllm:request_success_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture
async def two_replicas(tmp_path):
    """A cluster serving the sim model "chat" from two replicas on one node, and a client."""
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("cpu-node")
        spec = ModelSpec(
            name="chat",
            source="/models/none.gguf",
            replicas_min=2,
            replicas_max=2,
            slots=8,
            profiles=[
                ModelProfile(
                    name="default",
                    engine="sim",
                    # Answers take long enough to be in flight when an engine dies.
                    args=["--ttft-ms", "100", "--itl-ms", "5"],
                    startup_timeout_s=60,
                )
            ],
        )
        async with cluster.admin() as admin:
            await admin.put_model(spec)
            await admin.create_tenant("project", "acme/ml/search", parents=True)
            key = await admin.create_key("acme/ml/search", name="tests")

            async def both_ready():
                rs = [r for r in (await admin.list_replicas("chat")).replicas]
                ready = [r for r in rs if r.state == "ready" and r.endpoint]
                return ready if len(ready) == 2 else None

            replicas = await wait_for(both_ready, attempts=400)
        base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
        client = openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
        try:
            yield cluster, client, replicas
        finally:
            await client.close()


async def metrics(http, cluster, r):
    """A replica's /metrics, asked at its door with its own key as the gateway asks."""
    headers = replica_headers(cluster.paths.secrets_dir, r)
    return await http.get(r.endpoint + "/metrics", headers=headers)


async def ask(client, user: str = "", max_tokens: int = 3):
    kwargs = {"user": user} if user else {}
    return await client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=max_tokens,
        **kwargs,
    )


async def test_a_session_sticks_to_its_replica_and_sessions_spread(two_replicas):
    cluster, client, replicas = two_replicas
    async with httpx.AsyncClient() as http:

        async def finished() -> dict[str, float]:
            return {
                r.replica_id: success_count((await metrics(http, cluster, r)).text)
                for r in replicas
            }

        before = await finished()
        for _ in range(6):
            await ask(client, user="alice")
        after = await finished()
        moved = sorted(after[r] - before[r] for r in after)
        assert moved == [0, 6]  # every one of alice's requests on one replica

        before = after
        for i in range(16):
            await ask(client, user=f"user-{i}")
        after = await finished()
        assert all(after[r] > before[r] for r in after)

        # The scraper reads both replicas' load under vLLM's names.
        secrets_dir = cluster.paths.secrets_dir
        scraper = Scraper(
            lambda: [
                Target(
                    r.replica_id,
                    r.endpoint,
                    authorization=replica_headers(secrets_dir, r)["authorization"],
                )
                for r in replicas
            ]
        )
        async with aiohttp.ClientSession() as session:
            await scraper.scrape_once(session)
        for r in replicas:
            stats = scraper.stats(r.replica_id)
            assert stats is not None and stats.waiting == 0 and stats.kv_usage == 0
            text = (await metrics(http, cluster, r)).text
            assert parse_metrics(text) is not None


async def test_an_engine_killed_under_load_loses_no_request_not_yet_streaming(two_replicas, caplog):
    cluster, client, replicas = two_replicas
    router = cluster.server.gateway._router
    victim = replicas[0]

    async def killer():
        # Once both replicas have requests in flight, one engine dies.
        await wait_for(lambda: len(router.in_flight) == 2, attempts=400, interval_s=0.005)
        os.kill(victim.pid, signal.SIGKILL)

    kill = asyncio.create_task(killer())
    with caplog.at_level(logging.WARNING, logger="gatewayd.gateway.routing.forward"):
        answers = await asyncio.gather(*(ask(client, max_tokens=10) for _ in range(48)))
    await kill
    assert len(answers) == 48 and all(a.choices[0].message.content for a in answers)
    # Requests the dead engine held were sent again elsewhere.
    assert any(victim.replica_id in r.getMessage() for r in caplog.records)


@contextlib.asynccontextmanager
async def outside_provider(api_key: str):
    """``python -m agentd.sim`` on a free port with an API key, as an outside provider."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentd.sim",
        "--model",
        "provider-model",
        "--port",
        "0",
        "--ttft-ms",
        "1",
        "--itl-ms",
        "1",
        env={**os.environ, "LLMGW_ENGINE_KEY": api_key},
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert "serving provider-model on http://" in line, line
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        await proc.wait()


async def test_an_outside_provider_key_refused_is_passed_over_and_a_lone_one_refused_is_a_502(
    tmp_path, caplog
):
    async with (
        outside_provider("sk-good-provider-key") as url,
        running_cluster(tmp_path) as cluster,
    ):
        keys_dir = cluster.paths.provider_keys_dir  # where gatewayd reads such keys
        keys_dir.mkdir(parents=True, exist_ok=True)
        good, bad = keys_dir / "good.key", keys_dir / "bad.key"
        good.write_text("sk-good-provider-key\n")
        bad.write_text("sk-wrong-provider-key\n")

        def external(name: str, *files) -> ModelSpec:
            return ModelSpec(
                name=name,
                source="external",
                slots=1,
                external=ExternalSource(
                    url=url + "/v1",
                    model="provider-model",
                    api_key_files=[ExternalKey(file=str(f), weight=w) for f, w in files],
                ),
            )

        async with cluster.admin() as admin:
            await admin.put_model(external("outside", (good, 1), (bad, 3)))
            await admin.put_model(external("outside-bad", (bad, 0)))
            await admin.create_tenant("project", "acme/ml/search", parents=True)
            key = await admin.create_key("acme/ml/search", name="tests")
            view = await admin.get_model("outside")
            assert (view.state, view.reason) == ("serving", f"answered by {url}/v1 with 2 keys")
            with pytest.raises(UsageError, match="answered by an outside provider"):
                await admin.plan_model(PlanModelRequest(name="outside"))
        base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
        router = cluster.server.gateway._router
        async with openai.AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0) as client:
            models = {m.id: m.model_extra["loaded"] for m in (await client.models.list()).data}
            assert models == {"outside": True, "outside-bad": True}
            with caplog.at_level(logging.WARNING):
                for i in range(20):
                    answer = await client.chat.completions.create(
                        model="outside",
                        messages=[{"role": "user", "content": "hello"}],
                        max_tokens=3,
                        user=f"user-{i}",
                    )
                    # The answer names the model as the client asked for it, not the provider.
                    assert answer.model == "outside" and answer.usage.completion_tokens == 3
                    if router.key_refusals:
                        break
            assert router.key_refusals == {"external:outside#2": 1}
            refused = [
                m for m in (r.getMessage() for r in caplog.records) if "external_key_refused" in m
            ]
            assert refused and "external:outside#2" in refused[0] and url in refused[0]
            assert "sk-wrong" not in caplog.text and "sk-good" not in caplog.text

            # The client's key was good: the provider refusing ours is the gateway's failure.
            with pytest.raises(openai.InternalServerError) as err:
                await client.chat.completions.create(
                    model="outside-bad",
                    messages=[{"role": "user", "content": "hello"}],
                    max_tokens=3,
                )
            assert err.value.status_code == 502 and err.value.code == "upstream_error"
            assert "(401)" in err.value.message
        async with cluster.admin() as admin:
            # Nothing is placed or started for an outside provider's model.
            assert not (await admin.list_replicas("outside")).replicas
