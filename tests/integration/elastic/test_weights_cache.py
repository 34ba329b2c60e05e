"""A node's weights cache kept within its limit: real control plane, real agent, real fetch.

The node is a CPU machine (a recorded inventory) whose agent fetches a tiny
GGUF from a hub on loopback (tests/fakes/hub.py) into its cache and runs it
with llama.cpp's stand-in (tests/agentd/llama_server_standin.py, started from
the llama.cpp adapter's real command line). Older unused entries lie in the
cache from before, as earlier replicas left them. The cap comes through the
kept settings (``agents.nodes.<id>.weights_cache_max_bytes``), as an operator
sets it; ``llmgw ctl weights`` runs as typed, through Typer's CliRunner.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import stat
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from agentd.agent import Agent
from agentd.discovery import probe_for
from agentd.weights import cache
from llmgw.cli.main import app as llmgw_cli
from llmgw.errors import ExitCode
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.agentd.tiny_gguf import write_tiny_llama_gguf
from tests.cluster_fixture import running_cluster, wait_for
from tests.engine_access import replica_headers
from tests.fakes.hub import FakeHub
from tests.tui.parity.kit import point_the_cli_at

HERE = Path(__file__).parents[1]
STANDIN = HERE.parent / "agentd" / "llama_server_standin.py"
NODE = "cpu-a"
MIB = 2**20
DAY_S = 86_400
# The old entries' last uses: days ago, oldest first.
OLD = {"old-1": 3, "old-2": 2, "old-3": 1}


class StandInEngines:
    """llama.cpp is the stand-in program."""

    def __init__(self, program: Path) -> None:
        self.program = program

    async def ensure(self, engine: str, version: str) -> tuple[str | None, dict[str, str]]:
        return str(self.program), {}


def plant_old_entries(weights_dir: Path) -> None:
    """What earlier replicas left: one GGUF each, with its manifest, used days ago."""
    for name, days in OLD.items():
        d = weights_dir / name
        d.mkdir(parents=True)
        (d / "model.gguf").write_bytes(b"GGUF" + b"\0" * (MIB - 4))
        (d / ".model.gguf.json").write_text(json.dumps({"source": f"hf:org/{name}@c0:model.gguf"}))
        then = os.path.getmtime(d) - days * DAY_S
        os.utime(d, (then, then))


def tiny_model() -> ModelSpec:
    return ModelSpec(
        name="tiny",
        source="hf:org/tiny:tiny.gguf",
        profiles=[ModelProfile(name="default", engine="llama.cpp", cpu=True, startup_timeout_s=60)],
        replicas_min=1,
        replicas_max=1,
        slots=1,
    )


async def ctl(cluster, *args: str):
    """``llmgw ctl ARGS`` as typed, against the cluster (in a thread: it answers on this loop)."""
    env = {"LLMGW_HOME": str(cluster.paths.home), "COLUMNS": "200"}
    return await asyncio.to_thread(lambda: CliRunner().invoke(llmgw_cli, ["ctl", *args], env=env))


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def test_past_its_cap_a_node_loses_the_oldest_unused_weights_and_keeps_those_in_use(
    tmp_path, hub
):
    gguf = write_tiny_llama_gguf(tmp_path / "tiny.gguf").read_bytes()
    hub.add_repo("org/tiny", {"tiny.gguf": gguf})

    def point_at_hub(cfg):
        cfg.hub_url = hub.url

    async with running_cluster(tmp_path, configure=point_at_hub) as cluster:
        point_the_cli_at(cluster)
        cfg = cluster.agent_config(NODE, fixture="cpu_only_16c")
        cfg.hub_url, cfg.engine_user = hub.url, getpass.getuser()
        weights_dir = Path(cfg.data_dir) / "weights"
        plant_old_entries(weights_dir)
        program = tmp_path / "llama-server"
        program.write_text(f"#!{sys.executable}\n{STANDIN.read_text()}")
        program.chmod(program.stat().st_mode | stat.S_IXUSR)

        async def start_agent() -> Agent:
            agent = Agent(
                cfg,
                cluster.paths,
                probe=probe_for(cfg.hardware, Path(cfg.data_dir)),
                engines=StandInEngines(program),
            )
            stop = asyncio.Event()
            cluster.agents.append((agent, stop, asyncio.create_task(agent.run(stop))))
            await cluster.wait_nodes_ready(NODE)
            return agent

        await start_agent()

        async with cluster.admin() as admin:
            await admin.put_model(tiny_model())

            async def serving():
                rs = (await admin.list_replicas("tiny")).replicas
                return rs[0] if rs and rs[0].state == "ready" else None

            replica = await wait_for(serving, attempts=600)

            async def reported(check):
                node = (await admin.list_weights(NODE)).nodes[0]
                return node if node.reported_at and check(node.report) else None

            # The node says what it holds: the fetched model in use, the old ones unused.
            node = await wait_for(lambda: reported(lambda r: len(r.entries) == 4))
            held = {e.key: e for e in node.report.entries}
            assert list(held["tiny"].used_by) == [replica.replica_id]
            assert held["tiny"].source.startswith("hf:org/tiny@")
            assert not any(held[k].used_by for k in OLD)
            assert node.report.limit_percent == 50 and node.report.limit_max_bytes == 0

            listed = await ctl(cluster, "weights", NODE)
            assert listed.exit_code == 0, listed.output
            assert f"node {NODE}: " in listed.output and "(50% of disk)" in listed.output
            row = next(line for line in listed.output.splitlines() if line.startswith("tiny "))
            assert replica.replica_id in row and "just now" in row
            assert "3 d ago" in listed.output and "unused" in listed.output
            as_json = json.loads((await ctl(cluster, "weights", "--json")).stdout)
            assert [n["node_id"] for n in as_json["nodes"]] == [NODE]
            unknown = await ctl(cluster, "weights", "rm", "no-such-node", "tiny")
            assert unknown.exit_code == int(ExitCode.NOT_FOUND)
            assert "no node named 'no-such-node'; see: llmgw ctl nodes" in unknown.output

            # A cap that holds the model in use and one old entry: the two oldest go.
            cap = held["tiny"].size_bytes + held["old-3"].size_bytes + MIB // 2
            await admin.set_settings([f"agents.nodes.{NODE}.weights_cache_max_bytes={cap}"])
            node = await wait_for(lambda: reported(lambda r: len(r.entries) == 2), attempts=400)
            assert sorted(e.key for e in node.report.entries) == ["old-3", "tiny"]
            assert sorted(e.key for e in cache.scan(weights_dir)) == ["old-3", "tiny"]
            assert node.report.total_bytes <= node.report.limit_bytes == cap
            # The replica runs on: still ready, still answering.
            assert (await serving()) is not None
            door_headers = replica_headers(cluster.paths.secrets_dir, replica)
            async with httpx.AsyncClient(base_url=replica.endpoint, timeout=10) as http:
                assert (await http.get("/v1/models", headers=door_headers)).status_code == 200

            # Removing what a replica uses is refused, saying by which; an unused one goes.
            refused = await ctl(cluster, "weights", "rm", NODE, "tiny")
            assert refused.exit_code == int(ExitCode.ERROR), refused.output
            assert f"Kept tiny: in use by replica {replica.replica_id}" in refused.output
            assert (weights_dir / "tiny" / "tiny.gguf").is_file()
            removed = await ctl(cluster, "weights", "rm", NODE, "old-3", "--json")
            assert removed.exit_code == 0, removed.output
            reply = json.loads(removed.stdout)
            assert reply["removed"] == ["old-3"] and int(reply["freed_bytes"]) >= MIB
            await wait_for(lambda: not (weights_dir / "old-3").exists())

            # Below what the model in use needs: it stays, and the node says why.
            await admin.set_settings([f"agents.nodes.{NODE}.weights_cache_max_bytes={MIB}"])
            node = await wait_for(lambda: reported(lambda r: r.limit_bytes == MIB), attempts=400)
            assert [e.key for e in node.report.entries] == ["tiny"]
            assert "what is left is in use (tiny), so it stays" in node.report.note
            assert (await serving()) is not None
            listed = await ctl(cluster, "weights", NODE)
            assert "weights_cache_max_bytes, under 50% of disk" in listed.output
            assert "so it stays" in listed.output

            # A restarted agent adopts the engine and knows what it runs on (its state
            # file says): under the same cap, at its start, it still keeps it.
            await cluster.stop_agents()
            again = await start_agent()
            assert again.shards.running()[0].adopted
            report = await wait_for(
                lambda: (r := again.weights.last_report) and r.limit_bytes == MIB and r
            )
            assert [(e.key, list(e.used_by)) for e in report.entries] == [
                ("tiny", [replica.replica_id])
            ]
            assert (weights_dir / "tiny" / "tiny.gguf").is_file()
            assert (await serving()) is not None
