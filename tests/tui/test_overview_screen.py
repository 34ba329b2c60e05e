"""The console's shell and its Overview against a real gatewayd with agents on fake hardware."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from llmgw.admin_client import AdminClient
from llmgw.present.opsfmt import NO_WARNINGS, warning_line
from proto.llmgw.v1 import StatusReply
from tests.cluster_fixture import Cluster, running_cluster, wait_for
from tests.ports import free_port
from tests.tui.test_models_screen import READY_TRIES, sim_model
from tests.tui.test_nodes_screen import SIZE, wait_until
from tui.app import DARK, LIGHT, LlmgwApp
from tui.screens.batches.batches import BatchesScreen
from tui.screens.cluster.overview import OverviewScreen
from tui.screens.cluster.summary import ClusterSummary
from tui.screens.keys.keys import KeysScreen
from tui.screens.keys.usage import UsageScreen
from tui.screens.mcp.mcp import McpScreen
from tui.screens.mirror.mirror import MirrorScreen
from tui.screens.models.models import ModelsScreen
from tui.screens.models.replicas import ReplicasScreen
from tui.screens.nodes.nodes import NodesScreen
from tui.screens.settings.settings import SettingsScreen
from tui.screens.shell import SCREENS

SCREEN_OF = {
    "overview": OverviewScreen,
    "nodes": NodesScreen,
    "models": ModelsScreen,
    "replicas": ReplicasScreen,
    "keys": KeysScreen,
    "usage": UsageScreen,
    "batches": BatchesScreen,
    "mirror": MirrorScreen,
    "mcp": McpScreen,
    "settings": SettingsScreen,
}


@pytest.fixture
async def cluster(tmp_path):
    """A GPU node (8× H100, recorded) and a CPU node, both ready."""
    async with running_cluster(tmp_path) as c:
        await c.start_agent("gpu-box", fixture="h100_80g_x8")
        await c.start_agent("cpu-box", fixture="cpu_only_16c")

        async def both_ready():
            async with c.admin() as admin:
                return [n.state for n in (await admin.list_nodes()).nodes] == ["ready", "ready"]

        await wait_for(both_ready)
        yield c


def text(app: LlmgwApp, selector: str) -> str:
    """A widget's content as plain text, as a terminal 100 columns wide would show it."""
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(app.screen.query_one(selector, Static).content)
    return console.export_text()


def card(app: LlmgwApp, name: str) -> str:
    return text(app, f"#card-{name}")


async def test_the_overview_counts_what_ctl_status_nodes_and_models_print(cluster: Cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model(), create_only=True)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            assert isinstance(app.screen, OverviewScreen)  # the console opens on it
            await wait_until(pilot, lambda: "1/1 serving" in card(app, "models"), tries=READY_TRIES)
            # Screens ≡ commands: the same AdminClient calls `llmgw ctl … --json` print.
            status = await client.status()
            nodes = (await client.list_nodes()).nodes
            models = (await client.list_models()).models
            replicas = (await client.list_replicas()).replicas
            ready = sum(1 for n in nodes if n.state == "ready")
            assert (ready, len(nodes)) == (status.nodes_ready, status.nodes_total) == (2, 2)
            assert card(app, "nodes").startswith(f"{ready}/{len(nodes)} ready")
            serving = sum(1 for m in models if m.state == "serving")
            assert card(app, "models").startswith(f"{serving}/{len(models)} serving")
            wanted = sum(m.replicas_desired for m in models)
            assert f"replicas {sum(m.replicas_ready for m in models)}/{wanted}" in card(
                app, "models"
            )
            gpus = sum(len(n.gpus) for n in nodes)
            in_use = {(r.node_id, i) for r in replicas for i in r.gpu_indexes}
            assert card(app, "gpus").startswith(f"{len(in_use)}/{gpus} in use")
            assert gpus == 8
            # The header says it too, on every screen, with the cluster's name.
            assert app.sub_title == f"{ready}/{len(nodes)} nodes ready · {serving}/1 models serving"
            assert status.cluster_name in app.title
            memory = text(app, "#gpu-body")
            assert "gpu-box" in memory and "8× NVIDIA H100" in memory
            assert "0/637 GiB" in memory and "cpu-box" in memory and "CPU only" in memory


async def test_the_warnings_are_those_ctl_warnings_prints_and_follow_a_node_going_away(
    cluster: Cluster,
):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: NO_WARNINGS in text(app, "#warn-body"))
            _, stop, _ = cluster.agents[1]
            stop.set()  # cpu-box's agent goes: the node is not ready, with a reason
            await wait_until(pilot, lambda: "cpu-box" in text(app, "#warn-body"), tries=300)
            assert card(app, "nodes").startswith("1/2 ready")
            assert app.sub_title.startswith("1/2 nodes ready")
            # Drawn line by line from the reply `llmgw ctl warnings --json` prints.
            reply = await client.warnings()
            body = text(app, "#warn-body")
            for w in reply.warnings:
                console = Console(width=100, record=True, file=io.StringIO())
                console.print(warning_line(w))
                assert console.export_text() in body
            assert "not ready: agent disconnected" in body
            assert "llmgw ctl node rm cpu-box" in body


def test_requests_per_second_come_from_two_status_samples_apart():
    s = ClusterSummary()
    s.sample(StatusReply(requests_total=100, errors_total=1), now=10.0)
    assert s.rates() is None  # one sample says nothing of a rate
    s.sample(StatusReply(requests_total=160, errors_total=4), now=40.0)
    rates = s.rates()
    assert rates is not None
    assert (rates.requests_per_s, rates.errors_per_s) == (2.0, 0.1)
    # gatewayd restarted: its counters began again, and so does the measuring.
    s.sample(StatusReply(requests_total=5), now=45.0)
    assert s.rates() is None


async def test_every_screen_opens_at_80x24_and_the_footer_keys_fit(cluster: Cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=(80, 24)) as pilot:
            for entry in SCREENS:
                await pilot.press(entry.key)
                kind = SCREEN_OF[entry.mode]
                await wait_until(pilot, lambda kind=kind: isinstance(app.screen, kind))
                await pilot.pause(0.2)
                assert app.is_running
                if entry.mode in ("keys", "usage"):
                    continue  # their own keys are theirs to fit
                keys = list(app.screen.query(FooterKey))
                assert keys, entry.mode
                for key in keys:
                    assert key.region.right <= 80, (entry.mode, key.description)


async def test_the_tabs_open_screens_with_a_click_and_ctrl_t_toggles_the_theme(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            tabs = app.screen.query_one("#shell-tabs", Static)
            plain = str(tabs.render())
            await pilot.click("#shell-tabs", offset=(plain.index("p Replicas") + 1, 0))
            await wait_until(pilot, lambda: isinstance(app.screen, ReplicasScreen))

            assert app.theme == DARK
            await pilot.press("ctrl+t")
            assert app.theme == LIGHT and not app.current_theme.dark
            await pilot.press("ctrl+t")
            assert app.theme == DARK


async def test_the_command_palette_lists_every_screen_and_the_shown_screens_actions(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.screen.selected_node() is not None)
            titles = [c.title for c in app.get_system_commands(app.screen)]
            for entry in SCREENS:
                assert f"{entry.title} screen" in titles
            for action in ("Cordon (c)", "Drain (d)", "Remove (x)"):
                assert action in titles
            assert "Dark or light theme" in titles

            await pilot.press("ctrl+p")
            await pilot.press(*"Models screen")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))


async def test_an_unreachable_control_plane_is_said_in_the_header_and_on_the_overview():
    port = free_port()
    async with AdminClient(f"127.0.0.1:{port}", "any", timeout_s=2) as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            status = app.screen.query_one("#status", Static)
            await wait_until(pilot, lambda: "does not answer" in app.sub_title)
            assert f"gatewayd does not answer on 127.0.0.1:{port}" in str(status.render())
            assert status.has_class("-error")
            assert app.is_running
