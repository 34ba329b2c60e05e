"""The Nodes screen, its pane and its actions against a real gatewayd with real agents."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from textual.widgets import Static

from llmgw.present.nodefmt import node_cells
from llmgw.protojson import to_plain
from tests.cluster_fixture import running_cluster, wait_for
from tests.tui.test_models_screen import READY_TRIES, sim_model
from tests.tui.test_nodes_screen import SIZE, rows, state_of, table, wait_until
from tui.app import LlmgwApp
from tui.screens.dialogs import Confirm
from tui.screens.nodes.nodes import NodesScreen


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
        app = LlmgwApp(client, first_screen="nodes")
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


# ---- the pane and the actions on the selected node ---------------------------------


def pane(app: LlmgwApp) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(app.screen.query_one("#node-pane-body", Static).content)
    return console.export_text()


def action_line(app: LlmgwApp) -> Static:
    return app.screen.query_one("#action-line", Static)


async def select(app: LlmgwApp, pilot, node_id: str) -> None:
    t = table(app)
    t.focus()
    t.move_cursor(row=t.get_row_index(node_id))
    await wait_until(pilot, lambda: app.screen.selected_node_id() == node_id)


async def answer_yes(app: LlmgwApp, pilot, key: str) -> None:
    await pilot.press(key)
    await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
    await pilot.press("y")
    await wait_until(pilot, lambda: isinstance(app.screen, NodesScreen))


async def two_cpu_nodes(cluster) -> None:
    await cluster.start_agent("cpu-a", fixture="cpu_only_16c")
    await cluster.start_agent("cpu-b", fixture="cpu_only_16c")

    async def both_ready():
        async with cluster.admin() as a:
            return [n.state for n in (await a.list_nodes()).nodes] == ["ready", "ready"]

    await wait_for(both_ready)


async def test_a_drain_shows_what_is_left_to_move_and_the_drained_node_is_removed(cluster):
    await two_cpu_nodes(cluster)
    async with cluster.admin() as client:
        await client.put_model(sim_model(), create_only=True)

        async def ready_on():
            ready = [r for r in (await client.list_replicas()).replicas if r.state == "ready"]
            return ready[0] if ready else None

        first = await wait_for(ready_on, attempts=READY_TRIES)
        here, other = first.node_id, ({"cpu-a", "cpu-b"} - {first.node_id}).pop()
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(rows(app)) == 2)
            await select(app, pilot, here)
            await wait_until(pilot, lambda: f"{first.replica_id} ready" in pane(app))

            await answer_yes(app, pilot, "d")  # as `llmgw ctl drain`
            await wait_until(pilot, lambda: "Draining" in pane(app) or "Drained" in pane(app))
            assert state_of(app, here) == "ready cordoned draining"
            # The replica starts on the other node first, then stops here: live, no key pressed.
            await wait_until(pilot, lambda: "Drained: nothing runs on" in pane(app), tries=600)
            moved = [r for r in (await client.list_replicas()).replicas if r.state == "ready"]
            assert [r.node_id for r in moved] == [other]

            await answer_yes(app, pilot, "x")  # as `llmgw ctl node rm`
            await wait_until(pilot, lambda: here not in rows(app))
            assert f"Removed node {here}" in str(action_line(app).render())
            # What `llmgw ctl nodes --json` prints: the same list, without it.
            assert [n.node_id for n in (await client.list_nodes()).nodes] == [other]
            assert list(rows(app)) == [other]


async def test_remove_is_refused_in_place_with_what_to_do_and_c_cordons_and_uncordons(cluster):
    await two_cpu_nodes(cluster)
    async with cluster.admin() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(rows(app)) == 2)
            await select(app, pilot, "cpu-a")

            await answer_yes(app, pilot, "x")
            line = action_line(app)
            await wait_until(pilot, lambda: "drain it first" in str(line.render()))
            assert line.has_class("-error") and "llmgw ctl drain cpu-a" in str(line.render())
            assert "cpu-a" in rows(app)

            await pilot.press("c")  # as `llmgw ctl cordon cpu-a`
            await wait_until(pilot, lambda: state_of(app, "cpu-a") == "ready cordoned")
            assert (await client.get_node("cpu-a")).cordoned
            keys = {b.binding.action for b in app.screen.active_bindings.values()}
            assert "uncordon" in keys and "cordon" not in keys
            await pilot.press("c")  # now `llmgw ctl uncordon cpu-a`
            await wait_until(pilot, lambda: state_of(app, "cpu-a") == "ready")
            assert not (await client.get_node("cpu-a")).cordoned


async def test_the_pane_shows_each_gpu_with_its_replicas(cluster):
    await cluster.start_agent("gpu-box", fixture="h100_80g_x8")
    async with cluster.admin() as client:
        await wait_for(lambda: _ready(client, 1))
        await client.put_model(sim_model(), create_only=True)
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(rows(app)) == 1)
            await select(app, pilot, "gpu-box")
            await wait_until(pilot, lambda: " ready" in pane(app).split("GPU 1")[0], tries=600)
            (r,) = (await client.list_replicas()).replicas
            lines = pane(app).splitlines()
            (gpu,) = [x for x in lines if x.startswith(f"GPU {r.gpu_indexes[0]} ")]
            assert "NVIDIA H100 80GB HBM3" in gpu and "0/80 GiB" in gpu and r.replica_id in gpu
            assert sum(1 for x in lines if x.startswith("GPU ")) == 8
            assert "Engines:" in pane(app)


async def _ready(client, n: int) -> bool:
    return [x.state for x in (await client.list_nodes()).nodes] == ["ready"] * n
