"""A GPU replica is ready only when its cards hold it: real control plane, real agent, fake cards.

The node's cards are a recorded inventory (the fake GPU probe); llama.cpp is
``llama_server_standin.py``, started by the agent from the llama.cpp
adapter's real command line, which says what it holds on its cards as the
fake probe's contract asks — or, for a model named ``…-cpu-fallback.gguf``,
answers on the CPU as a llama.cpp whose GPU backend did not load does.
Regression: such a llama.cpp used to be shown as a ready GPU replica.
"""

from __future__ import annotations

import asyncio
import io
import json
import stat
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agentd.agent import Agent
from agentd.discovery import probe_for
from llmgw.present.nodefmt import node_details
from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.agentd.tiny_gguf import write_tiny_llama_gguf
from tests.cluster_fixture import running_cluster, wait_for

GIB = 2**30
HERE = Path(__file__).parent
FIXTURES = HERE.parent / "fixtures" / "hardware"


class StandInEngines:
    """llama.cpp is the stand-in program; the sim is the agent's own."""

    def __init__(self, program: Path) -> None:
        self.program = program

    async def ensure(self, engine: str, version: str) -> tuple[str | None, dict[str, str]]:
        return (None, {}) if engine == "sim" else (str(self.program), {})


def recorded(tmp_path: Path, name: str, **host) -> Path:
    """A copy of a recorded inventory with some host facts changed (a measured bandwidth)."""
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    data["host"].update(host)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


async def gpu_node(cluster, tmp_path: Path, node_id: str, fixture: Path) -> Agent:
    program = tmp_path / "llama-server"
    standin = (HERE / "llama_server_standin.py").read_text()
    program.write_text(f"#!{sys.executable}\n{standin}")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    cfg = cluster.agent_config(node_id, fixture=str(fixture))
    probe = probe_for(cfg.hardware, Path(cfg.data_dir))
    agent = Agent(cfg, cluster.paths, probe=probe, engines=StandInEngines(program))
    stop = asyncio.Event()
    cluster.agents.append((agent, stop, asyncio.create_task(agent.run(stop))))

    async def ready():
        async with cluster.admin() as admin:
            return [n.state for n in (await admin.list_nodes()).nodes] == ["ready"]

    await wait_for(ready, attempts=200)
    return agent


def model(name: str, source: Path, *, per_card_gib: int, startup_s: int = 60) -> ModelSpec:
    return ModelSpec(
        name=name,
        source=str(source),
        profiles=[
            ModelProfile(
                name="default",
                engine="llama.cpp",
                gpu=GpuNeed(count=1, min_memory_bytes=per_card_gib * GIB),
                startup_timeout_s=startup_s,
            )
        ],
        replicas_min=1,
        replicas_max=1,
        slots=1,
    )


async def replica(cluster, name: str, predicate):
    async def find():
        async with cluster.admin() as admin:
            rs = (await admin.list_replicas(name)).replicas
        return next((r for r in rs if predicate(r)), None)

    return await wait_for(find, attempts=600)


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        yield c


async def test_a_gpu_replica_that_answers_on_the_cpu_is_not_ready_and_fails_saying_so(
    cluster, tmp_path
):
    await gpu_node(cluster, tmp_path, "a100-box", FIXTURES / "a100_40g_x2_nvlink.json")
    weights = write_tiny_llama_gguf(tmp_path / "tiny-cpu-fallback.gguf")
    async with cluster.admin() as admin:
        await admin.put_model(model("fallback", weights, per_card_gib=4, startup_s=3))

    waiting = await replica(cluster, "fallback", lambda r: "hold no memory" in r.reason)
    assert waiting.state == "starting"
    assert "but its processes hold no memory on GPU" in waiting.reason
    failed = await replica(cluster, "fallback", lambda r: "runs on the CPU" in r.reason)
    assert failed.state == "failed"
    assert (
        f"answers, but runs on the CPU: its processes hold no memory on GPU {failed.gpu_indexes[0]}"
        in failed.reason
    )
    assert "no usable GPU found" in failed.reason  # its last lines come with it


async def test_a_gpu_replica_holding_memory_on_its_card_is_ready_and_that_memory_is_its_own(
    cluster, tmp_path
):
    agent = await gpu_node(cluster, tmp_path, "a100-box", FIXTURES / "a100_40g_x2_nvlink.json")
    weights = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    async with cluster.admin() as admin:
        await admin.put_model(model("tiny", weights, per_card_gib=4))

    r = await replica(cluster, "tiny", lambda r: r.state == "ready")
    (gpu,) = r.gpu_indexes
    assert r.reason.endswith(f"holds 2.0 GiB on GPU {gpu}")
    held = json.loads((agent.probe.procs_dir / f"{r.pid}.json").read_text())
    assert held["cuda_visible_devices"] == str(gpu)

    async def sampled():
        async with cluster.admin() as admin:
            node = await admin.get_node("a100-box")
        s = next((s for s in node.gpu_samples if s.index == gpu), None)
        return s if s and s.memory_used_bytes else None

    sample = await wait_for(sampled, attempts=200)
    assert (sample.memory_used_bytes, sample.memory_foreign_bytes) == (2 * GIB, 0)


async def test_a_replica_on_a_mig_instance_is_given_it_by_uuid_and_is_ready_on_it(
    cluster, tmp_path
):
    agent = await gpu_node(cluster, tmp_path, "mig-box", FIXTURES / "a100_80g_mig.json")
    weights = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    async with cluster.admin() as admin:
        await admin.put_model(model("on-mig", weights, per_card_gib=4))

    r = await replica(cluster, "on-mig", lambda r: r.state == "ready")
    (unit,) = r.gpu_indexes
    instance = next(g for g in agent.inventory.gpus if g.index == unit)
    assert instance.mig_instance and instance.uuid.startswith("MIG-")
    held = json.loads((agent.probe.procs_dir / f"{r.pid}.json").read_text())
    assert held["cuda_visible_devices"] == instance.uuid
    assert r.reason.endswith(f"holds 2.0 GiB on GPU {unit}")


async def test_node_show_draws_nvlink_peers_mig_instances_and_the_memory_bandwidth(
    cluster, tmp_path
):
    fixture = recorded(tmp_path, "a100_80g_mig", mem_bandwidth_gbs=41.9)
    await gpu_node(cluster, tmp_path, "mig-box", fixture)
    async with cluster.admin() as admin:
        view = await admin.get_node("mig-box")
    assert view.host.mem_bandwidth_gbs == 41.9
    assert [g.mig_instance for g in view.gpus] == [False] + [True] * 7
    out = io.StringIO()
    Console(file=out, width=160).print(node_details(view))
    shown = out.getvalue()
    assert "memory bandwidth  41.9 GB/s (measured)" in shown
    assert shown.count("1g.10gb of GPU 0") == 7 and "enabled" in shown
