"""vLLM and SGLang end to end on a fake 2 x A100 NVLink node: `ctl model serve` to answers.

What is real: the control plane and the agent (in-process, real gRPC and
mutual TLS), `llmgw ctl` (a subprocess, as an operator types it), uv
building the engine's environment with --require-hashes from a package
index on loopback, the weights fetched file by file from a hub on loopback,
the engine process and its command line, the gateway, and the official
openai SDK. What is not: the GPUs (a recorded inventory, driver R580) and
the engines (stand-ins that take vLLM's and SGLang's flags and answer as
they do, and write what NVML would show of their memory on their cards).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from llmgw.config import dump_yaml, load_server_config
from llmgw.present.modelfmt import serve_spec
from tests.cluster_fixture import running_cluster, wait_for
from tests.fakes.engines.fixtures import NEW_DRIVER, a100_pair_fixture_file, h100_node_fixture_file
from tests.fakes.engines.stand_ins import VERSIONS
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

GIB = 2**30
A100_BYTES = 42949672960


@pytest.fixture
async def hub():
    async with FakeHub() as hub:
        hub.add_repo("org/tiny", make_tiny_repo().files)
        yield hub


async def ctl(cluster, *args: str) -> dict:
    """``llmgw ctl ARGS --json`` against the cluster, as an operator runs it; its JSON reply."""
    rc, out, err = await cluster.ctl(*args, "--json")
    assert rc == 0, err
    return json.loads(out)


def proc_file(pid: int, name: str) -> list[bytes]:
    """/proc/<pid>/<name> (cmdline, environ): what every user of the node can read."""
    return Path(f"/proc/{pid}/{name}").read_bytes().rstrip(b"\0").split(b"\0")


def cmdline(pid: int) -> list[str]:
    return [a.decode() for a in proc_file(pid, "cmdline")]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


async def serve_on_the_a100_pair(tmp_path, hub, stand_ins, engine: str, driver: str = NEW_DRIVER):
    """A cluster with the engine's recipe, the A100 pair's agent, and `ctl model serve`."""

    def configure(cfg):
        cfg.hub_url = hub.url

    cluster_cm = running_cluster(tmp_path, engines=[stand_ins.release(engine)], configure=configure)
    cluster = await cluster_cm.__aenter__()
    try:
        # ctl finds the admin port in server.yaml: the one the test's server took.
        cfg = load_server_config(cluster.paths.server_yaml)
        cfg.listen.admin = f"127.0.0.1:{cluster.server.ports['admin']}"
        cluster.paths.server_yaml.write_text(dump_yaml(cfg))
        agent_cfg = cluster.agent_config(
            "a100-pair",
            fixture=str(a100_pair_fixture_file(tmp_path / "a100-pair.json", driver)),
        )
        agent_cfg.hub_url = hub.url
        await cluster.start_agent("a100-pair", cfg=agent_cfg)
        added = await ctl(
            cluster, "model", "serve", "hf:org/tiny", "--engine", engine, "--gpus", "2",
            "--name", "tiny",
        )  # fmt: skip
        assert added["spec"]["source"].startswith("hf:org/tiny")
    except BaseException:
        await cluster_cm.__aexit__(*sys.exc_info())
        raise
    cluster.agent_cfg = agent_cfg
    return cluster_cm, cluster


async def ready_replica(cluster):
    async def ready():
        async with cluster.admin() as admin:
            rs = (await admin.list_replicas("tiny")).replicas
        return rs[0] if rs and rs[0].state == "ready" else None

    return await wait_for(ready, attempts=600, interval_s=0.1)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
async def test_ctl_model_serve_runs_the_engine_on_the_nvlink_pair_and_the_sdk_gets_answers(
    tmp_path, hub, stand_ins, engine
):
    cluster_cm, cluster = await serve_on_the_a100_pair(tmp_path, hub, stand_ins, engine)
    try:
        r = await ready_replica(cluster)
        # TP=2 on the two cards NVLink joins; the node built the engine meanwhile.
        assert r.node_id == "a100-pair" and sorted(r.gpu_indexes) == [0, 1]
        planned = cluster.server.reconciler.replicas[r.replica_id]
        states = [e.state for e in planned.history]
        assert states.index("fetching") < states.index("installing") < states.index("starting")

        argv = cmdline(r.pid)
        assert argv[0].endswith(f"/{engine}/{VERSIONS[engine]}-cu129/venv/bin/python")
        per_card = max(planned.per_gpu_bytes.values())
        if engine == "vllm":
            assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
            assert flag(argv, "--tensor-parallel-size") == "2"
            assert flag(argv, "--served-model-name") == "tiny"
            share = float(flag(argv, "--gpu-memory-utilization"))
            model_path = flag(argv, "--model")
            assert flag(argv, "--max-model-len") == str(planned.context)
        else:
            assert "sglang.launch_server" in argv[2]
            assert flag(argv, "--tp-size") == "2"
            assert flag(argv, "--served-model-name") == "tiny"
            share = float(flag(argv, "--mem-fraction-static"))
            model_path = flag(argv, "--model-path")
            assert flag(argv, "--context-length") == str(planned.context)
        # The engine on loopback; the replica's port is its door's (agentd/door).
        door = door_record(cluster, r.replica_id)
        assert (flag(argv, "--host"), flag(argv, "--port")) == ("127.0.0.1", str(door["engine_port"]))
        assert door["port"] == r.port
        # The plan's bytes on each card as the engine's share of it, never less.
        assert share >= per_card / A100_BYTES and share - per_card / A100_BYTES < 0.011
        # The weights the agent fetched and checked, and the cache as the download dir.
        weights = cluster.paths.agent_data_dir / "a100-pair" / "weights"
        assert model_path.startswith(str(weights)) and os.path.isfile(
            os.path.join(model_path, "config.json")
        )
        assert flag(argv, "--download-dir") == str(weights)
        # The key is in the engine's environment only (the node's own, not the
        # replica's the gateway shows at the door), and it is kept off the hub.
        key = door["engine_key"]
        assert key not in " ".join(argv) and door["keys"] and door["keys"][0] not in " ".join(argv)
        environ = proc_file(r.pid, "environ")
        assert any(e.endswith(f"={key}".encode()) for e in environ)
        assert b"HF_HUB_OFFLINE=1" in environ and b"TRANSFORMERS_OFFLINE=1" in environ
        assert b"CUDA_VISIBLE_DEVICES=0,1" in environ

        async with cluster.admin() as admin:
            await admin.create_tenant("project", "acme/ml/search", parents=True)
            api_key = await admin.create_key("acme/ml/search", name="tests")
        base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
        async with openai.AsyncOpenAI(base_url=base, api_key=api_key.secret, max_retries=0) as sdk:
            chat = await sdk.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=5
            )
            assert chat.choices[0].message.content
            assert chat.usage.completion_tokens == 5
            stream = await sdk.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "hello"}],
                max_tokens=4,
                stream=True,
            )
            words = [c.choices[0].delta.content async for c in stream if c.choices]
            assert len([w for w in words if w]) == 4
    finally:
        await cluster_cm.__aexit__(None, None, None)


def door_record(cluster, shard_id: str) -> dict:
    """The agent's record of a shard's engine door: its port, the engine's port and key."""
    path = cluster.paths.agent_data_dir / "a100-pair" / "doors" / f"{shard_id}.json"
    return json.loads(path.read_text())


async def test_the_key_sglang_prints_at_launch_is_redacted_in_logs_reasons_and_admin_tools(
    tmp_path, hub, stand_ins
):
    # sgl-project/sglang#37457: SGLang logs its ServerArgs, api_key='<engine key>' among
    # them, and engine output reaches `ctl logs`, a failed start's reason and the
    # llmgw:admin tools, which an API key may be granted read-only: it read the engine key.
    redacted = "api_key='[redacted]'"
    cluster_cm, cluster = await serve_on_the_a100_pair(tmp_path, hub, stand_ins, "sglang")
    try:
        ready = await ready_replica(cluster)
        # What the engine was given and printed: the node's own key for it (its door's record).
        key = door_record(cluster, ready.replica_id)["engine_key"]
        rc, printed, err = await cluster.ctl("logs", ready.replica_id)
        assert rc == 0, err
        assert redacted in printed and key not in printed

        # The same engine failing to load after its banner: the reason quotes its last lines.
        async with cluster.admin() as admin:
            spec = (await admin.get_model("tiny")).spec
            spec.profiles[0].env["LLMGW_FAKE_ENGINE_LOAD_ERROR"] = "CUDA out of memory"
            await admin.put_model(spec)

        def failed_with_the_banner():
            for replica in cluster.server.reconciler.replicas.values():
                if "Scheduler hit an exception" in replica.reason:
                    return replica
            return None

        failed = await wait_for(failed_with_the_banner, attempts=600, interval_s=0.1)
        key = door_record(cluster, failed.replica_id)["engine_key"]  # the failed start's
        assert redacted in failed.reason and key not in failed.reason
        rc, table, err = await cluster.ctl("replicas")
        assert rc == 0, err
        assert key not in table
        replicas = json.dumps(await ctl(cluster, "replicas"))
        assert redacted in replicas and key not in replicas

        # An API key granted the read-only tools reads the same, through the SDK.
        async with cluster.admin() as admin:
            await admin.create_tenant("project", "acme/ml/ops", parents=True)
            reader = await admin.create_key("acme/ml/ops", name="reader")
            for tool in ("node_logs", "list_replicas"):
                await admin.grant_mcp(reader.key_id, f"llmgw:admin.{tool}")
        url = f"http://127.0.0.1:{cluster.server.ports['http']}/mcp"
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {reader.secret}"}, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http)) as c:
            logs = await c.call_tool("llmgw_admin.node_logs", {"node": "a100-pair"})
            listed = await c.call_tool("llmgw_admin.list_replicas", {"model": "tiny"})
        for result in (logs, listed):
            assert not result.is_error, result
            said = json.dumps(result.structured_content) + " ".join(b.text for b in result.content)
            assert redacted in said and key not in said
    finally:
        await cluster_cm.__aexit__(None, None, None)


async def test_a_vllm_replica_is_scraped_logged_and_adopted_by_a_restarted_agent(
    tmp_path, hub, stand_ins
):
    cluster_cm, cluster = await serve_on_the_a100_pair(tmp_path, hub, stand_ins, "vllm")
    try:
        r = await ready_replica(cluster)
        # The router reads the engine's own metric names (vllm:num_requests_running, ...).
        stats = await wait_for(lambda: cluster.server.scraper.stats(r.replica_id), attempts=100)
        assert stats.kv_usage is not None
        seen: list[str] = []

        async def logged() -> bool:
            # The engine's lines reach the agent as it reads them: ready may come first.
            async with cluster.admin() as admin:
                seen[:] = (await admin.replica_logs(r.replica_id)).lines
            return any("Uvicorn running on http://127.0.0.1:" in line for line in seen)

        assert await wait_for(logged, attempts=200), seen

        # The agent goes and comes back; the engine kept running and is its own again.
        await cluster.stop_agents()
        agent, _, _ = await cluster.start_agent("a100-pair", cfg=cluster.agent_cfg)

        def adopted():
            status = agent.shards.status.get(
                cluster.server.reconciler.replicas[r.replica_id].shard_id
            )
            ok = status is not None and status.adopted and status.state == "ready"
            return status if ok else None

        status = await wait_for(adopted, attempts=400)
        assert status.pid == r.pid  # the same engine process, not a new one
        assert status.reason.startswith(f"adopted from a previous agent (pid {r.pid})")
        replica = cluster.server.reconciler.replicas[r.replica_id]
        assert (replica.state, replica.pid) == ("ready", r.pid)
        async with cluster.admin() as admin:
            await admin.create_tenant("project", "acme/ml/search", parents=True)
            api_key = await admin.create_key("acme/ml/search", name="tests")
        base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
        async with openai.AsyncOpenAI(base_url=base, api_key=api_key.secret, max_retries=0) as sdk:
            chat = await sdk.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "still there?"}], max_tokens=3
            )
        assert chat.usage.completion_tokens == 3
        assert cmdline(r.pid)[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    finally:
        await cluster_cm.__aexit__(None, None, None)


async def test_the_recorded_a100_pair_on_driver_535_says_why_vllm_cannot_run_there(
    tmp_path, hub, stand_ins
):
    # The recorded node's own driver: vLLM 0.11 is built for CUDA 12.9 and 12.8 only.
    cluster_cm, cluster = await serve_on_the_a100_pair(
        tmp_path, hub, stand_ins, "vllm", driver="535.129.03"
    )
    words = "driver 535 is older than what CUDA 12.9 needs"
    try:

        async def engine_failed():
            async with cluster.admin() as admin:
                engines = (await admin.list_engines()).engines
            return [e for e in engines if e.engine == "vllm" and e.state == "failed"]

        (engine,) = await wait_for(engine_failed, attempts=400)
        assert words in engine.message and engine.node_id == "a100-pair"

        async def explained():
            async with cluster.admin() as admin:
                reply = await admin.explain_placement("tiny")
            return {n.node_id: n.reason for n in reply.reasons}.get("a100-pair", "")

        assert words in await wait_for(lambda: explained(), attempts=200)
        r = cluster.server.reconciler.replicas
        assert all(x.state != "ready" for x in r.values())
    finally:
        await cluster_cm.__aexit__(None, None, None)


async def test_a_vllm_that_fell_back_to_the_cpu_is_not_ready_and_says_so(tmp_path, hub, stand_ins):
    # The stand-in's switch plays an engine that serves without its cards.
    cluster_cm, cluster = await serve_on_the_a100_pair(tmp_path, hub, stand_ins, "vllm")
    try:
        async with cluster.admin() as admin:
            spec = (await admin.get_model("tiny")).spec
            spec.profiles[0].env["LLMGW_FAKE_ENGINE_ON_CPU"] = "1"
            await admin.put_model(spec)

        def waiting_on_its_cards():
            for replica in cluster.server.reconciler.replicas.values():
                if replica.state == "starting" and "hold no memory on GPU" in replica.reason:
                    return replica
            return None

        # It answers /health, but holds nothing on its cards: not ready, and
        # failed "runs on the CPU" once its startup deadline passes.
        replica = await wait_for(waiting_on_its_cards, attempts=600, interval_s=0.1)
        assert replica.reason.endswith("its processes hold no memory on GPU 0 or 1 yet"), (
            replica.reason
        )
        assert b"LLMGW_FAKE_ENGINE_ON_CPU=1" in proc_file(replica.pid, "environ")
    finally:
        await cluster_cm.__aexit__(None, None, None)


async def test_a_node_that_joined_before_the_recipe_gets_it_with_the_replica(
    tmp_path, hub, stand_ins
):
    # No recipe when the node connects; set later (as a reloaded server.yaml
    # would), the control plane sends InstallEngine along with the StartShard.
    def configure(cfg):
        cfg.hub_url = hub.url

    async with running_cluster(tmp_path, configure=configure) as cluster:
        cfg = cluster.agent_config(
            "a100-pair", fixture=str(a100_pair_fixture_file(tmp_path / "a100-pair.json"))
        )
        cfg.hub_url = hub.url
        await cluster.start_agent("a100-pair", cfg=cfg)

        async def node_ready():
            async with cluster.admin() as admin:
                return [n.state for n in (await admin.list_nodes()).nodes] == ["ready"]

        await wait_for(node_ready, attempts=400)
        assert not list(cluster.paths.engines_dir.glob("vllm/*"))
        cluster.server.reconciler.set_engines([stand_ins.release("vllm")])
        async with cluster.admin() as admin:
            await admin.put_model(serve_spec("hf:org/tiny", name="tiny", engine="vllm", gpus=2))
        r = await ready_replica(cluster)
        assert cmdline(r.pid)[0].endswith("/vllm/0.11.0-cu129/venv/bin/python")
        async with cluster.admin() as admin:
            engines = (await admin.list_engines()).engines
        (vllm,) = [e for e in engines if e.engine == "vllm" and e.node_id]
        assert (vllm.state, vllm.version, vllm.variant) == ("installed", "0.11.0", "cu129")


@pytest.mark.parametrize(
    ("precision", "flags", "node"),
    [
        # fp8 runs on compute capability 8.9 and newer: an H100 node, not the A100 pair.
        ("fp8", ["--quantization", "fp8"], h100_node_fixture_file),
        ("bf16", ["--dtype", "bfloat16"], a100_pair_fixture_file),
    ],
)
async def test_the_profiles_precision_reaches_vllm_as_the_plan_sized_it(
    tmp_path, hub, stand_ins, precision, flags, node
):
    def configure(cfg):
        cfg.hub_url = hub.url

    async with running_cluster(
        tmp_path, engines=[stand_ins.release("vllm")], configure=configure
    ) as cluster:
        cfg = cluster.agent_config("gpu-node", fixture=str(node(tmp_path / "gpu-node.json")))
        cfg.hub_url = hub.url
        await cluster.start_agent("gpu-node", cfg=cfg)
        spec = serve_spec("hf:org/tiny", name="tiny", engine="vllm", gpus=2)
        spec.profiles[0].precision = precision
        async with cluster.admin() as admin:
            await admin.put_model(spec)
        r = await ready_replica(cluster)
        argv = cmdline(r.pid)
        i = argv.index(flags[0])
        assert argv[i : i + 2] == flags
