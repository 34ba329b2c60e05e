"""Two control planes on one PostgreSQL: one leads, the other serves clients and stands by.

Real gatewayd servers in-process on loopback, a real agent with a sim
replica, the official openai SDK as the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from gatewayd.server import GatewayServer
from llmgw.config import StoreConfig
from llmgw.errors import LlmgwError
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from tests.cluster_fixture import Cluster, make_server_config, wait_for
from tests.gatewayd.test_admin_ops import sim_model

pytestmark = pytest.mark.postgres

# Short, so the test does not wait out a production lease (10 s).
LEASE_TTL_S = 2.0
PROJECT = "acme/ml/chat"


def _config(paths: Paths, dsn: str):
    cfg = make_server_config(paths)
    cfg.listen.agent, cfg.listen.admin = "127.0.0.1:0", "127.0.0.1:0"
    cfg.listen.http, cfg.listen.metrics = "127.0.0.1:0", "127.0.0.1:0"
    cfg.store = StoreConfig(dsn=dsn)
    cfg.cluster.lease_ttl_s = LEASE_TTL_S
    cfg.cluster.advertise_host = "127.0.0.1"
    return cfg


def _second_home(first: Paths, home: Path) -> Paths:
    """Another control plane of the same cluster: its CA, certificate and secrets, its own data."""
    paths = Paths.under(home)
    shutil.copytree(first.config_dir, paths.config_dir)
    return paths


async def _start(paths: Paths, dsn: str) -> GatewayServer:
    server = GatewayServer(_config(paths, dsn), paths)
    await server.start()
    return server


def _http(server: GatewayServer) -> str:
    return f"http://127.0.0.1:{server.ports['http']}"


async def _leader_answers(server: GatewayServer) -> int:
    async with httpx.AsyncClient() as c:
        return (await c.get(_http(server) + "/leader")).status_code


async def _chat(server: GatewayServer, secret: str) -> str:
    client = AsyncOpenAI(base_url=_http(server) + "/v1", api_key=secret, max_retries=0)
    answer = await client.chat.completions.create(
        model="sim-chat", messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    return answer.choices[0].message.content or ""


async def _chat_or_none(server: GatewayServer, secret: str) -> str | None:
    try:
        return await _chat(server, secret)
    except openai.AuthenticationError:
        return None


async def test_a_standby_serves_clients_refuses_the_leaders_work_and_leads_after_a_clean_stop(
    tmp_path, fresh_postgres_dsn
):
    first = Paths.under(tmp_path / "a")
    init_server(first, hosts=["localhost", "127.0.0.1"])
    a = await _start(first, fresh_postgres_dsn)
    # As server add carries them: the CA, certificates and secrets (the engine key too).
    second = _second_home(first, tmp_path / "b")
    b = await _start(second, fresh_postgres_dsn)
    cluster = Cluster(first, a, first.admin_token_file.read_text().strip())
    stopped_a = False
    try:
        # One leads (the first to start), the other stands by; each says so.
        assert a.roles.leading() and not b.roles.leading()
        assert await _leader_answers(a) == 200 and await _leader_answers(b) == 503
        async with cluster.admin() as admin:
            status = await admin.status()
        assert status.leader and status.leader_id == a.control_plane_id
        assert status.store_state == "ok"

        async def both_listed():
            async with cluster.admin() as admin:
                planes = (await admin.status()).control_planes
            return {p.control_plane_id: p.role for p in planes} == {
                a.control_plane_id: "leader",
                b.control_plane_id: "standby",
            }

        await wait_for(both_listed, attempts=200)

        # The agent is told of the standby first: the standby names the leader,
        # and the agent dials it.
        cfg = cluster.agent_config("cpu-a", fixture="cpu_only_16c")
        cfg.control_planes = [f"127.0.0.1:{b.ports['agent']}", f"127.0.0.1:{a.ports['agent']}"]
        agent, _, _ = await cluster.start_agent("cpu-a", cfg=cfg)
        await wait_for(lambda: agent.connected_to == f"127.0.0.1:{a.ports['agent']}")
        async with cluster.admin() as admin:
            await admin.put_model(sim_model(), create_only=True)
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT, name="client")

            async def ready():
                return (await admin.get_model("sim-chat")).replicas_ready == 1

            await wait_for(ready, attempts=600)

        # The standby answers clients from what the leader wrote: the key, the
        # catalog, the replica's address.
        b_admin = Cluster(second, b, cluster.token).admin()
        async with b_admin as admin:

            async def standby_sees_it():
                nodes = {n.node_id: n.state for n in (await admin.list_nodes()).nodes}
                reps = (await admin.list_replicas("sim-chat")).replicas
                return nodes == {"cpu-a": "ready"} and [r.state for r in reps] == ["ready"]

            await wait_for(standby_sees_it, attempts=200)
            # The standby reads keys from the store every 2 s: the new key works soon.
            assert await wait_for(lambda: _chat_or_none(b, key.secret), attempts=200)

            # What only the leader does is refused on the standby, naming the leader.
            with pytest.raises(LlmgwError) as refused:
                await admin.scale_model("sim-chat", 2)
            assert "standing by" in refused.value.message
            assert a.control_plane_id in refused.value.message
            # ... and its machine, from the control planes' rows as b read them.
            assert f"on {socket.gethostname()}" in refused.value.message

        pid = next(iter(a.reconciler.replicas.values())).pid
        assert pid

        # A clean stop gives the lease up: the standby leads, the agent follows it,
        # and the engine kept running throughout (adopted, same process).
        began = time.monotonic()
        await a.stop()
        stopped_a = True
        await wait_for(lambda: b.roles.leading(), attempts=200)
        handover_s = time.monotonic() - began
        print(f"clean-stop handover: {handover_s:.2f} s")
        await wait_for(lambda: agent.connected_to == f"127.0.0.1:{b.ports['agent']}", attempts=400)
        async with b_admin as admin:

            async def ready_on_b():
                reps = (await admin.list_replicas("sim-chat")).replicas
                return [(r.state, r.pid) for r in reps] == [("ready", pid)]

            await wait_for(ready_on_b, attempts=400)
            status = await admin.status()
        assert status.leader and status.leader_id == b.control_plane_id
        assert await _leader_answers(b) == 200
        assert await _chat(b, key.secret)
        os.kill(pid, 0)  # still the same engine process
    finally:
        await cluster.stop_agents()
        for server in (b, a):
            for r in server.reconciler.replicas.values() if server.reconciler else []:
                if r.pid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(r.pid, signal.SIGTERM)
        await b.stop()
        if not stopped_a:
            await a.stop()
        await asyncio.sleep(0)
