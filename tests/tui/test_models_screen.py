"""The Models screen and its dialogs against a real gatewayd, real agents and the sim engine."""

from __future__ import annotations

import io
import os
import signal

import pytest
from rich.console import Console
from textual.widgets import DataTable, Input, Select, Static

from llmgw.admin_client import AdminClient
from llmgw.present.modelfmt import (
    NO_MODELS,
    layout_cells,
    model_cells,
    name_from_source,
    serve_spec,
)
from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec, PlanModelRequest
from tests.cluster_fixture import Cluster, running_cluster, wait_for
from tests.tui.test_nodes_screen import SIZE, wait_until
from tui.app import LlmgwApp
from tui.screens.models.models import ConfirmRemove, ExplainPlacement, ModelsScreen, ScaleDialog
from tui.screens.models.replicas import ReplicasScreen
from tui.screens.models.serve import ServeDialog
from tui.screens.nodes.nodes import NodesScreen

# A replica of the sim engine is ready in a second or two; 30 s covers a loaded machine.
READY_TRIES = 600


@pytest.fixture(name="cluster")
async def cpu_cluster(tmp_path):
    """A real gatewayd with one CPU-only agent, ready; engines it started are stopped after."""
    async with running_cluster(tmp_path) as c:
        # A recorded CPU-only machine: the same answers on a laptop and on a GPU box.
        await c.start_agent("cpu-node", fixture="cpu_only_16c")

        async def node_ready():
            async with c.admin() as admin:
                return [n.state for n in (await admin.list_nodes()).nodes] == ["ready"]

        await wait_for(node_ready, attempts=200)
        yield c
        # Engines outlive their agent (it adopts them when it comes back): stop them here.
        for r in c.server.reconciler.replicas.values():
            if r.pid:
                try:
                    os.kill(r.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def sim_model(name: str = "sim-chat", replicas: int = 1) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        profiles=[ModelProfile(name="default", engine="sim", startup_timeout_s=60)],
        replicas_min=replicas,
        replicas_max=replicas,
        slots=1,
    )


def watching(cluster: Cluster, topic: str) -> bool:
    """Whether a console's Watch on ``topic`` is open at gatewayd (the reconciler watches
    nodes and engines only). Changes made before it opens would arrive as no event."""
    return any(topic in sub.topics for sub in cluster.server.registry.watch._subs)


def table(app: LlmgwApp) -> DataTable:
    return app.screen.query_one("#models", DataTable)


def rows(app: LlmgwApp) -> dict[str, list[str]]:
    """Every row as plain text, by model name."""
    t = table(app)
    return {str(key.value): [str(c) for c in t.get_row(key)] for key in t.rows}


def cell(app: LlmgwApp, name: str, column: str) -> str:
    t = table(app)
    return str(t.get_cell(name, column)) if name in rows(app) else ""


def plain(static: Static) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(static.content)
    return console.export_text()


async def open_models(app: LlmgwApp, pilot, cluster: Cluster) -> ModelsScreen:
    await pilot.press("m")
    await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
    await wait_until(pilot, lambda: watching(cluster, "models"))
    assert isinstance(app.screen, ModelsScreen)
    return app.screen


async def served_and_ready(app: LlmgwApp, pilot, name: str) -> None:
    await wait_until(pilot, lambda: cell(app, name, "ready") == "1/1", tries=READY_TRIES)


async def test_the_rows_are_what_ctl_models_lists_and_follow_a_replica_to_ready(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_models(app, pilot, cluster)
            empty = screen.query_one("#empty", Static)
            await wait_until(pilot, lambda: empty.display)
            assert str(empty.render()).startswith(NO_MODELS)

            await client.put_model(sim_model(), create_only=True)
            # Added: a row at once (the sim replica may be ready by the first draw) …
            await wait_until(pilot, lambda: "sim-chat" in rows(app))
            assert rows(app)["sim-chat"][2] in ("0/1", "1/1")
            # … then READY follows its replica without a refresh (no key pressed).
            await served_and_ready(app, pilot, "sim-chat")
            assert cell(app, "sim-chat", "state") == "serving"

            # Screens ≡ commands: `llmgw ctl models` prints this same reply with these cells.
            reply = await client.list_models()
            assert rows(app) == {
                m.spec.name: [str(c) for c in model_cells(m)] for m in reply.models
            }
            assert rows(app)["sim-chat"][3:5] == ["sim", "/models/none.gguf"]
            assert "Models: 1 (1 serving)" in str(screen.query_one("#status", Static).render())


async def test_scaling_from_the_screen_changes_the_replicas_wanted(cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model(), create_only=True)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_models(app, pilot, cluster)
            await served_and_ready(app, pilot, "sim-chat")

            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ScaleDialog))
            field = app.screen.query_one("#scale-replicas", Input)
            assert field.value == "1"
            await pilot.press("end", "backspace", "2", "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))

            assert (await client.get_model("sim-chat")).replicas_desired == 2
            await wait_until(pilot, lambda: cell(app, "sim-chat", "ready").endswith("/2"))
            # The second replica comes up too, and the row says so live.
            await wait_until(
                pilot, lambda: cell(app, "sim-chat", "ready") == "2/2", tries=READY_TRIES
            )


async def test_a_scale_that_is_not_a_number_is_refused_in_the_dialog(cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model(replicas=0), create_only=True)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_models(app, pilot, cluster)
            await wait_until(pilot, lambda: "sim-chat" in rows(app))
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ScaleDialog))
            await pilot.press("end", "backspace", "-", "enter")
            status = app.screen.query_one("#scale-status", Static)
            await wait_until(pilot, lambda: status.has_class("-error"))
            assert "whole numbers from 0 to 1000" in str(status.render())
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
            assert (await client.get_model("sim-chat")).replicas_desired == 0


async def test_bounds_from_the_screen_let_the_load_decide_between_them(cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model(replicas=0), create_only=True)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_models(app, pilot, cluster)
            await wait_until(pilot, lambda: "sim-chat" in rows(app))
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ScaleDialog))
            await pilot.press("end", "backspace", "1", ".", ".", "3", "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
            spec = (await client.get_model("sim-chat")).spec
            assert (spec.replicas_min, spec.replicas_max) == (1, 3)
            await wait_until(pilot, lambda: cell(app, "sim-chat", "ready").endswith("(1..3)"))


async def test_removing_from_the_screen_removes_the_model(cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model(), create_only=True)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_models(app, pilot, cluster)
            await served_and_ready(app, pilot, "sim-chat")

            # Asked first; Escape keeps it.
            await pilot.press("d")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmRemove))
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
            assert "sim-chat" in rows(app)

            await pilot.press("d")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmRemove))
            await pilot.click("#remove-confirm")
            await wait_until(pilot, lambda: "sim-chat" not in rows(app))
            assert (await client.list_models()).models == []
            assert app.screen.query_one("#empty").display

            # Its replica is stopped on the node, not left running.
            async def stopped():
                rs = (await client.list_replicas("sim-chat")).replicas
                return all(r.state == "stopped" for r in rs)

            await wait_for(stopped, attempts=400)


async def test_the_serve_dialog_plans_and_serves_a_sim_model(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_models(app, pilot, cluster)
            await pilot.press("a")
            await wait_until(pilot, lambda: isinstance(app.screen, ServeDialog))
            dialog = app.screen

            # The source field has the focus.
            await pilot.press(*"/models/none.gguf")
            name = dialog.query_one("#serve-name", Input)
            assert name.placeholder.startswith(name_from_source("/models/none.gguf"))
            await pilot.click("#serve-name")
            await pilot.press(*"sim-served")
            dialog.query_one("#serve-engine", Select).value = "sim"
            await pilot.click("#serve-cpu")

            # Plan: the layouts `llmgw ctl model plan` prints, from the same call.
            await pilot.click("#serve-plan-button")
            layouts = dialog.query_one("#serve-layouts", DataTable)
            await wait_until(pilot, lambda: layouts.row_count > 0)
            plan = await client.plan_model(
                PlanModelRequest(source="/models/none.gguf", engine="sim")
            )
            assert [[str(c) for c in layouts.get_row_at(i)] for i in range(layouts.row_count)] == [
                list(layout_cells(lay)) for lay in plan.layouts
            ]
            assert "CPU" in [str(layouts.get_row_at(i)[0]) for i in range(layouts.row_count)]
            assert "size is unknown" in plain(dialog.query_one("#serve-plan", Static))

            # Serve: the spec `llmgw ctl model serve` builds, added create-only.
            assert dialog.build_spec() == serve_spec(
                "/models/none.gguf", name="sim-served", engine="sim", cpu=True
            )
            await pilot.click("#serve-button")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
            await wait_until(pilot, lambda: "sim-served" in rows(app))
            await served_and_ready(app, pilot, "sim-served")
            view = await client.get_model("sim-served")
            assert view.spec.profiles[0].engine == "sim" and view.spec.profiles[0].cpu


async def test_a_refused_serve_stays_in_the_dialog_in_gatewayds_words(cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model("taken", replicas=0), create_only=True)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_models(app, pilot, cluster)
            await pilot.press("a")
            await wait_until(pilot, lambda: isinstance(app.screen, ServeDialog))
            dialog = app.screen
            status = dialog.query_one("#serve-status", Static)

            # Checked here first, as the command checks its options.
            await pilot.press(*"models/relative.gguf", "enter")
            await wait_until(pilot, lambda: status.has_class("-error"))
            assert "a local path must be absolute" in str(status.render())

            # Refused by gatewayd: a model of that name exists.
            dialog.query_one("#serve-source", Input).value = "/models/none.gguf"
            dialog.query_one("#serve-name", Input).value = "taken"
            dialog.query_one("#serve-engine", Select).value = "sim"
            status.set_class(False, "-error")
            await pilot.click("#serve-button")
            await wait_until(pilot, lambda: status.has_class("-error"))
            assert "taken" in str(status.render())
            assert isinstance(app.screen, ServeDialog) and app.is_running
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
            assert list(rows(app)) == ["taken"]


async def test_explain_shows_why_a_model_fits_on_no_node(cluster):
    spec = sim_model("big")
    spec.profiles[0].gpu = GpuNeed(count=2, min_memory_bytes=80 * 2**30)
    async with cluster.admin() as client:
        await client.put_model(spec)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_models(app, pilot, cluster)
            await wait_until(pilot, lambda: cell(app, "big", "state") == "unplaceable")

            await pilot.press("e")
            await wait_until(pilot, lambda: isinstance(app.screen, ExplainPlacement))
            reasons = app.screen.query_one("#explain-reasons", DataTable)
            await wait_until(pilot, lambda: reasons.row_count == 1)

            # What `llmgw ctl explain-placement big` prints, from the same call.
            explained = await client.explain_placement("big")
            assert explained.placement is None
            assert [[str(c) for c in reasons.get_row(n.node_id)] for n in explained.reasons] == [
                ["cpu-node", explained.reasons[0].reason]
            ]
            assert "GPU" in explained.reasons[0].reason
            summary = plain(app.screen.query_one("#explain-summary", Static))
            assert f"big cannot be placed: {explained.refused}" in summary

            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))


async def test_n_m_and_p_switch_screens_and_each_keeps_its_rows(cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model(replicas=0), create_only=True)
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            assert isinstance(app.screen, NodesScreen)
            keys = {b.binding.key for b in app.screen.active_bindings.values()}
            assert {"n", "m", "p", "r", "q"} <= keys

            await pilot.press("m")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
            models = app.screen
            await wait_until(pilot, lambda: "sim-chat" in rows(app))
            shown = {b.binding.key for b in models.active_bindings.values() if b.binding.show}
            assert {"a", "s", "d", "e"} <= shown

            await pilot.press("p")
            await wait_until(pilot, lambda: isinstance(app.screen, ReplicasScreen))
            await pilot.press("n")
            await wait_until(pilot, lambda: isinstance(app.screen, NodesScreen))
            await pilot.press("m")
            # The same screen, still live: no second read needed to show its rows.
            assert app.screen is models and "sim-chat" in rows(app)


async def test_an_unreachable_control_plane_is_an_error_line_on_the_models_screen():
    from tests.ports import free_port

    port = free_port()
    async with AdminClient(f"127.0.0.1:{port}", "any", timeout_s=2) as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("m")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
            status = app.screen.query_one("#status", Static)
            await wait_until(pilot, lambda: "does not answer" in str(status.render()))
            assert status.has_class("-error")
            # Nobody said the catalog is empty.
            assert not app.screen.query_one("#empty").display
            # Nothing to act on: s, d and e do nothing rather than fail.
            await pilot.press("s", "d", "e")
            assert isinstance(app.screen, ModelsScreen) and app.is_running
