"""The Replicas screen and its restart against a real gatewayd, agent and sim engine."""

from __future__ import annotations

import io

from rich.console import Console
from textual.widgets import DataTable, Static

from llmgw.present.modelfmt import NO_REPLICAS, history_cells, replica_cells
from proto.llmgw.v1 import FetchProgress, ReplicaView
from tests.cluster_fixture import Cluster
from tests.tui.test_models_screen import (  # cpu_cluster: the "cluster" fixture
    READY_TRIES,
    cpu_cluster,  # noqa: F401
    sim_model,
    watching,
)
from tests.tui.test_nodes_screen import SIZE, wait_until
from tui.app import LlmgwApp
from tui.screens.dialogs import Confirm
from tui.screens.models.replicas import ReplicaChanged, ReplicaDetails, ReplicasScreen, replica_body


def table(app: LlmgwApp) -> DataTable:
    return app.screen.query_one("#replicas", DataTable)


def rows(app: LlmgwApp) -> dict[str, list[str]]:
    """Every row as plain text, by replica id."""
    t = table(app)
    return {str(key.value): [str(c) for c in t.get_row(key)] for key in t.rows}


def states(app: LlmgwApp) -> list[str]:
    return [r[4] for r in rows(app).values()]


def plain(static: Static) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(static.content)
    return console.export_text()


async def open_replicas(app: LlmgwApp, pilot, cluster: Cluster) -> ReplicasScreen:
    await pilot.press("p")
    await wait_until(pilot, lambda: isinstance(app.screen, ReplicasScreen))
    await wait_until(pilot, lambda: watching(cluster, "replicas"))
    assert isinstance(app.screen, ReplicasScreen)
    return app.screen


async def test_a_replica_goes_to_ready_live_and_enter_shows_its_history(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_replicas(app, pilot, cluster)
            empty = screen.query_one("#empty", Static)
            await wait_until(pilot, lambda: empty.display)
            assert str(empty.render()).startswith(NO_REPLICAS)

            await client.put_model(sim_model(), create_only=True)
            await wait_until(pilot, lambda: len(rows(app)) == 1)
            # Every step shows as it happens: no key is pressed until it is ready.
            await wait_until(pilot, lambda: states(app) == ["ready"], tries=READY_TRIES)
            (row,) = rows(app).values()
            assert row[1:4] == ["sim-chat", "cpu-node", "CPU"]
            assert "· http://" in row[7]  # ready: the endpoint

            # Screens ≡ commands: `llmgw ctl replicas` prints this reply with these cells.
            reply = await client.list_replicas()
            assert rows(app) == {
                r.replica_id: [str(c) for c in replica_cells(r)] for r in reply.replicas
            }
            assert "Replicas: 1 (1 ready)" in str(screen.query_one("#status", Static).render())

            table(app).focus()
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ReplicaDetails))
            (view,) = reply.replicas
            history = app.screen.query_one("#replica-history", DataTable)
            got = [[str(c) for c in history.get_row_at(i)] for i in range(history.row_count)]
            assert got == [[str(c) for c in history_cells(e)] for e in view.history]
            assert got[0][1] == "pending" and got[-1][1] == "ready"
            assert "placed" in [g[1] for g in got]
            facts = plain(app.screen.query_one("#replica-facts", Static))
            assert view.replica_id in facts and "deadline" in facts
            assert (view.deadline or "-") in facts
            # The engine's log tail, fetched from its node as `llmgw ctl logs` does.
            # The node follows the engine's output a moment behind it: l reads it again.
            logs = app.screen.query_one("#replica-logs", Static)
            for _ in range(READY_TRIES // 10):
                if "serving sim-chat" in plain(logs):
                    break
                await pilot.press("l")
                await pilot.pause(0.5)
            assert "serving sim-chat" in plain(logs)

            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, ReplicasScreen))


async def test_the_open_history_follows_the_replica_as_it_is_stopped(cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model(), create_only=True)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_replicas(app, pilot, cluster)
            await wait_until(pilot, lambda: states(app) == ["ready"], tries=READY_TRIES)
            table(app).focus()
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ReplicaDetails))
            history = app.screen.query_one("#replica-history", DataTable)

            def last_state() -> str:
                return str(history.get_row_at(history.row_count - 1)[1])

            await client.scale_model("sim-chat", 0)
            await wait_until(pilot, lambda: last_state() == "stopped", tries=READY_TRIES)
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, ReplicasScreen))
            assert states(app) == ["stopped"]


async def test_a_replica_gatewayd_forgot_loses_its_row(cluster):
    # gatewayd announces a replica it forgot as an event without a view.
    async with cluster.admin() as client:
        await client.put_model(sim_model(replicas=0), create_only=True)
        await client.scale_model("sim-chat", 1)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_replicas(app, pilot, cluster)
            await wait_until(pilot, lambda: states(app) == ["ready"], tries=READY_TRIES)
            (replica_id,) = rows(app)
            screen.post_message(ReplicaChanged(replica_id, None))
            await wait_until(pilot, lambda: rows(app) == {})
            assert screen.query_one("#empty").display


async def test_r_restarts_the_selected_replica_and_a_new_one_takes_its_place(cluster):
    async with cluster.admin() as client:
        await client.put_model(sim_model(), create_only=True)
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_replicas(app, pilot, cluster)
            await wait_until(pilot, lambda: states(app) == ["ready"], tries=READY_TRIES)
            (old,) = rows(app)
            table(app).focus()
            await pilot.press("R")
            await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
            await pilot.press("y")  # as `llmgw ctl replica restart`
            await wait_until(pilot, lambda: isinstance(app.screen, ReplicasScreen))
            line = app.screen.query_one("#action-line", Static)
            await wait_until(pilot, lambda: "a new replica of sim-chat" in str(line.render()))
            assert not line.has_class("-error")

            def replaced() -> bool:
                ready = [i for i, r in rows(app).items() if r[4] == "ready"]
                return bool(ready) and old not in ready

            await wait_until(pilot, replaced, tries=READY_TRIES)
            assert rows(app)[old][4] in ("draining", "stopped")
            # The same rows `llmgw ctl replicas` prints.
            reply = await client.list_replicas()
            assert rows(app) == {
                r.replica_id: [str(c) for c in replica_cells(r)] for r in reply.replicas
            }

            # Restarting the one on its way out is refused, in place, with why.
            t = table(app)
            t.move_cursor(row=t.get_row_index(old))
            await pilot.press("R")
            await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
            await pilot.press("y")
            await wait_until(pilot, lambda: "already" in str(line.render()))
            assert line.has_class("-error")


async def test_the_history_shows_a_downloads_progress():
    view = ReplicaView(
        replica_id="chat-1",
        model="chat",
        node_id="gpu-1",
        state="fetching",
        reason="downloading",
        fetch=FetchProgress(bytes_done=3 * 2**30, bytes_total=4 * 2**30),
    )
    assert "75% of 4.0 GiB" in plain_renderable(replica_body(view))


def plain_renderable(renderable) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()
