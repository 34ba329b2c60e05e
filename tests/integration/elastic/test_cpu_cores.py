"""CPU replicas reserve cores: placement counts them per node, the engine is given them as
threads, and ``ctl model resources`` shows and changes them. Through a real gatewayd and
agent (a recorded 16-core machine without GPUs), sim engines as real processes; the real
llama.cpp side is in test_on_demand.py (the starter run with one core)."""

from __future__ import annotations

import json
from pathlib import Path

from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for


def _spec(cores: int, replicas: int) -> ModelSpec:
    return ModelSpec(
        name="cpu-chat",
        source="/models/none.gguf",
        replicas_min=replicas,
        replicas_max=replicas,
        slots=1,
        profiles=[
            ModelProfile(name="default", engine="sim", cpu=True, cores=cores, startup_timeout_s=60)
        ],
    )


async def _ctl(cluster, *args: str) -> tuple[int, str]:
    rc, out, err = await cluster.ctl(*args)
    return rc, out + err


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


async def _live(admin) -> list:
    return [r for r in (await admin.list_replicas("cpu-chat")).replicas if r.state != "stopped"]


async def test_cpu_replicas_reserve_cores_the_engine_gets_them_and_a_change_rolls_out(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("cpu-box", fixture="cpu_only_16c")
        await cluster.wait_nodes_ready("cpu-box")
        async with cluster.admin() as admin:
            await admin.put_model(_spec(cores=6, replicas=3))

            # 16 cores: two replicas of six; the third waits, saying why.
            async def two_ready_one_pending():
                live = await _live(admin)
                states = sorted(r.state for r in live)
                return live if states == ["pending", "ready", "ready"] else None

            live = await wait_for(two_ready_one_pending, attempts=600, interval_s=0.1)
            (pending,) = [r for r in live if r.state == "pending"]
            assert pending.reason == (
                "no node can run it: 1 short of CPU cores (most free 4, needs 6)"
            )
            for r in live:
                if r.state == "ready":
                    assert r.cores == 6
                    argv = _argv(r.pid)
                    assert argv[argv.index("--threads") + 1] == "6"
            node = await admin.get_node("cpu-box")
            assert node.cores_taken == 12

            # The command shows it, and changes it: replicas restart one at a time on 4 cores.
            rc, shown = await _ctl(cluster, "model", "resources", "cpu-chat")
            assert rc == 0, shown
            assert "default (sim, CPU): 6 cores per CPU replica" in shown
            rc, out = await _ctl(cluster, "model", "resources", "cpu-chat", "--json")
            facts = json.loads(out)
            assert facts["nodes"] == [
                {"node_id": "cpu-box", "cpu_count": 16, "cores_taken": 12, "cores_free": 4}
            ]
            assert sorted(r["cores"] for r in facts["replicas"]) == [6, 6]

            rc, out = await _ctl(cluster, "model", "resources", "cpu-chat", "--cores", "4")
            assert rc == 0, out
            assert "Replicas restart one at a time" in out

            async def three_on_four():
                live = await _live(admin)
                done = len(live) == 3 and all(r.state == "ready" and r.cores == 4 for r in live)
                return live if done else None

            live = await wait_for(three_on_four, attempts=900, interval_s=0.1)
            for r in live:
                argv = _argv(r.pid)
                assert argv[argv.index("--threads") + 1] == "4"
            assert (await admin.get_node("cpu-box")).cores_taken == 12

            # More cores than any node has is refused before anything restarts.
            rc, out = await _ctl(cluster, "model", "resources", "cpu-chat", "--cores", "32")
            assert rc != 0
            assert "no node has 32 CPU cores to reserve (the most is 16, on cpu-box)" in out
