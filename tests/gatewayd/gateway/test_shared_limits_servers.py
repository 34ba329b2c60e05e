"""Budgets and limits across two real gatewayd on one PostgreSQL, through their HTTP ports.

Two control planes of one cluster (the second with the first's CA and
secrets, as ``llmgw server add`` carries them) serve an outside model with a
price, answered by a sim engine; the official openai SDK is the client.
What one control plane charged is refused by the other.
"""

from __future__ import annotations

import shutil
import time

import openai
import pytest

from gatewayd.server import GatewayServer
from llmgw.config import StoreConfig
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from proto.llmgw.v1 import ExternalKey, ExternalSource, LimitsView, ModelPrice, ModelSpec
from tests.cluster_fixture import Cluster, make_server_config, wait_for
from tests.e2e.test_usage_kill9 import _sim

pytestmark = pytest.mark.postgres

PROJECT = "Acme/ml/chat"


async def _start(paths: Paths, dsn: str) -> GatewayServer:
    cfg = make_server_config(paths)
    cfg.listen.agent, cfg.listen.admin = "127.0.0.1:0", "127.0.0.1:0"
    cfg.listen.http, cfg.listen.metrics = "127.0.0.1:0", "127.0.0.1:0"
    cfg.store = StoreConfig(dsn=dsn)
    cfg.cluster.advertise_host = "127.0.0.1"
    server = GatewayServer(cfg, paths)
    await server.start()
    return server


def _client(server: GatewayServer, secret: str) -> openai.AsyncOpenAI:
    base = f"http://127.0.0.1:{server.ports['http']}/v1"
    return openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0)


async def _ask(client: openai.AsyncOpenAI):
    return await client.chat.completions.create(
        model="outside", messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )


async def _knows(client: openai.AsyncOpenAI) -> bool:
    """Whether a control plane knows the key and the model yet (costs nothing)."""
    try:
        return "outside" in {m.id async for m in client.models.list()}
    except openai.AuthenticationError:
        return False


async def test_a_key_spent_through_one_control_plane_is_refused_by_the_other(
    tmp_path, fresh_postgres_dsn
):
    first = Paths.under(tmp_path / "a")
    init_server(first, hosts=["localhost", "127.0.0.1"])
    second = Paths.under(tmp_path / "b")
    key = first.provider_keys_dir / "provider.key"
    key.parent.mkdir(parents=True)
    key.write_text("sk-provider\n")
    shutil.copytree(first.config_dir, second.config_dir)
    # Each control plane reads the key at the one path (/etc/llmgw/secrets/providers/…
    # on every machine): the second's directory is the first's.
    shutil.rmtree(second.provider_keys_dir)
    second.provider_keys_dir.symlink_to(first.provider_keys_dir)
    sim, url = _sim("sk-provider")
    a = b = None
    try:
        a = await _start(first, fresh_postgres_dsn)
        b = await _start(second, fresh_postgres_dsn)
        cluster = Cluster(first, a, first.admin_token_file.read_text().strip())
        async with cluster.admin() as admin:
            await admin.put_model(
                ModelSpec(
                    name="outside",
                    source="external",
                    slots=16,
                    external=ExternalSource(
                        url=f"{url}/v1",
                        model="provider-model",
                        api_key_files=[ExternalKey(file=str(key))],
                    ),
                    price=ModelPrice(prompt_per_thousand=1000, completion_per_thousand=2000),
                )
            )
            await admin.create_tenant("project", PROJECT, parents=True)
            # The project may spend one micro-unit a month: the first answer spends it.
            await admin.set_limits(LimitsView(scope=PROJECT, budget_month_micros=1))
            key = await admin.create_key(PROJECT)
        on_a, on_b = _client(a, key.secret), _client(b, key.secret)
        await wait_for(lambda: _knows(on_a), attempts=600)
        await wait_for(lambda: _knows(on_b), attempts=600)

        assert (await _ask(on_a)).choices
        with pytest.raises(openai.RateLimitError) as on_a_refused:
            await _ask(on_a)
        spent_at = time.monotonic()
        # Two full rounds of A's sync (the first may have begun before the charge), then
        # two of B's: B has read what A wrote. B never answered this key itself.
        for plane in (a, b):
            done = plane.shared_limits.rounds
            await wait_for(lambda p=plane, n=done: p.shared_limits.rounds >= n + 2, attempts=400)
        print(f"shared within {time.monotonic() - spent_at:.2f} s")
        with pytest.raises(openai.RateLimitError) as refused:
            await _ask(on_b)
        on_b_refused = refused.value
        # The same refusal as on A: OpenAI's shape, the same words, no Retry-After.
        assert on_b_refused.body["code"] == on_a_refused.value.body["code"] == "budget_exceeded"
        assert on_b_refused.message == on_a_refused.value.message
        assert f"project {PROJECT}: its monthly budget" in on_b_refused.message
        assert "retry-after" not in on_b_refused.response.headers
        await on_a.close()
        await on_b.close()
    finally:
        for server in (b, a):
            if server is not None:
                await server.stop()
        sim.terminate()
        sim.wait(timeout=20)
