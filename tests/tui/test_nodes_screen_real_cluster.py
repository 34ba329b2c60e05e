"""The Nodes screen and `llmgw ctl nodes` against a real gatewayd with real agents."""

from __future__ import annotations

import pytest

from llmgw.nodefmt import node_cells
from llmgw.protojson import to_plain
from tests.cluster_fixture import running_cluster, wait_for
from tests.tui.test_nodes_screen import SIZE, rows, state_of, wait_until
from tui.app import LlmgwApp


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        yield c


async def test_the_screen_and_the_command_show_the_same_nodes_from_one_admin_call(cluster):
    await cluster.start_agent("gpu-box", fixture="h100_80g_x8")
    await cluster.start_agent("cpu-box", fixture="cpu_only_16c")

    async def both_ready():
        async with cluster.admin() as a:
            return [n.state for n in (await a.list_nodes()).nodes] == ["ready", "ready"]

    await wait_for(both_ready)
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(rows(app)) == 2)
            # What `llmgw ctl nodes` prints comes from this same method and reply.
            reply = await client.list_nodes()
            assert set(rows(app)) == {n.node_id for n in reply.nodes}
            for n in reply.nodes:
                assert rows(app)[n.node_id] == [str(c) for c in node_cells(n)]
            assert "8× NVIDIA H100 80GB HBM3" in rows(app)["gpu-box"][7]
            assert [n["node_id"] for n in to_plain(reply)["nodes"]] == ["cpu-box", "gpu-box"]

            # Live: the agent goes away and the row says so without a refresh.
            _, stop, _ = cluster.agents[1]
            stop.set()
            await wait_until(
                pilot, lambda: state_of(app, "cpu-box").startswith("not_ready"), tries=200
            )
