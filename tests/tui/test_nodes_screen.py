"""The Nodes screen against a real admin server over gRPC, driven by Textual's pilot."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from llmgw.admin_client import AdminClient
from llmgw.errors import ConfigError
from llmgw.paths import Paths
from llmgw.present.nodefmt import NO_NODES, node_cells
from proto.llmgw.v1 import ReplicaView
from tests.ports import free_port
from tests.tui.kit.fake_admin import FakeAdminServer, node
from tui.app import LlmgwApp, run_console
from tui.screens.nodes.node_pane import drain_of, node_pane
from tui.screens.nodes.nodes import NodeDetails, NodesScreen

SIZE = (120, 40)


async def wait_until(pilot: Pilot, cond: Callable[[], bool], *, tries: int = 100) -> None:
    """Let the app and the server work until ``cond`` holds; at most ``tries`` × 50 ms."""
    for _ in range(tries):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"gave up waiting for {cond.__doc__ or cond}")


def table(app: LlmgwApp) -> DataTable:
    return app.screen.query_one("#nodes", DataTable)


def status(app: LlmgwApp) -> str:
    return str(app.screen.query_one("#status", Static).render())


def details_text(app: LlmgwApp) -> str:
    """The open node details as plain text, as a terminal 100 columns wide would show them."""
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(app.screen.query_one("#details-body", Static).content)
    return console.export_text()


def rows(app: LlmgwApp) -> dict[str, list[str]]:
    """Every row as plain text, by node id."""
    t = table(app)
    return {str(key.value): [str(c) for c in t.get_row(key)] for key in t.rows}


def state_of(app: LlmgwApp, node_id: str) -> str:
    return str(table(app).get_cell(node_id, "state"))


@pytest.fixture
async def server():
    async with FakeAdminServer() as srv:
        yield srv


async def test_the_nodes_screen_shows_the_nodes_the_server_has(server):
    server.service.put(node("gpu-1", gpus=2))
    server.service.put(node("cpu-1", state="not_ready", reason="no heartbeat for 30 s"))
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            assert isinstance(app.screen, NodesScreen)
            assert app.title == "llmgw"
            await wait_until(pilot, lambda: len(table(app).rows) == 2)
            got = rows(app)
            assert got["gpu-1"] == [
                "gpu-1",
                "ready",
                "",
                "debian 12 (fake)",
                "x86_64",
                "16",
                "64 GiB",
                "2× NVIDIA H100 80GB HBM3 (all free)",
                "-",
            ]
            assert got["cpu-1"][1:3] == ["not_ready", "no heartbeat for 30 s"]
            assert got["cpu-1"][7] == "none (no NVIDIA driver)"
            assert "Nodes: 2 (1 ready)" in status(app)


async def test_the_rows_are_what_ctl_nodes_lists(server):
    # Screens ≡ commands: `llmgw ctl nodes --json` prints list_nodes() as it is;
    # the screen must list the same nodes in the same states, drawn by the same helpers.
    server.service.put(node("a", gpus=8))
    server.service.put(node("b", state="registering", reason="first contact"))
    server.service.put(node("c", cordoned=True))
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(table(app).rows) == 3)
            reply = await client.list_nodes()
            assert {(i, r[1]) for i, r in rows(app).items()} == {
                (n.node_id, str(node_cells(n)[1])) for n in reply.nodes
            }
            assert rows(app) == {n.node_id: [str(c) for c in node_cells(n)] for n in reply.nodes}
            assert state_of(app, "c") == "ready cordoned"


async def test_a_node_changing_state_updates_its_row_live(server):
    server.service.put(node("gpu-1"))
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(table(app).rows) == 1)
            await wait_until(pilot, lambda: server.service.watchers == 1)

            server.service.put(node("gpu-1", state="not_ready", reason="no heartbeat for 9 s"))
            await wait_until(pilot, lambda: state_of(app, "gpu-1") == "not_ready")
            assert rows(app)["gpu-1"][2] == "no heartbeat for 9 s"
            assert "Nodes: 1 (0 ready)" in status(app)

            # A node seen for the first time gets a row; one gatewayd forgets loses it.
            server.service.put(node("gpu-2", state="registering"))
            await wait_until(pilot, lambda: "gpu-2" in rows(app))
            server.service.forget("gpu-1")
            await wait_until(pilot, lambda: list(rows(app)) == ["gpu-2"])


async def test_an_empty_cluster_says_how_to_add_a_node(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            empty = app.screen.query_one("#empty", Static)
            await wait_until(pilot, lambda: empty.display)
            assert str(empty.render()) == NO_NODES
            assert NO_NODES == "No nodes yet. Add one: llmgw node add HOST (or run llmgw up here)."

            await wait_until(pilot, lambda: server.service.watchers == 1)
            server.service.put(node("first"))
            await wait_until(pilot, lambda: not empty.display)
            assert list(rows(app)) == ["first"]


async def test_an_unreachable_control_plane_shows_an_error_line_instead_of_crashing():
    port = free_port()
    async with AdminClient(f"127.0.0.1:{port}", "any", timeout_s=2) as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: "does not answer" in status(app))
            assert f"gatewayd does not answer on 127.0.0.1:{port}" in status(app)
            assert "start it (llmgw server, or llmgw up)" in status(app)
            await wait_until(pilot, lambda: "trying again in" in status(app))
            assert app.screen.query_one("#status").has_class("-error")
            # Not "No nodes yet": nobody has said so.
            assert not app.screen.query_one("#empty").display
            assert app.is_running


async def test_the_screen_recovers_by_itself_when_gatewayd_comes_back():
    # Regression guard: a watch cut by a gatewayd restart must not leave the screen
    # frozen on old rows; it reopens with backoff and reads the whole list again.
    port = free_port()
    async with AdminClient(f"127.0.0.1:{port}", "test-admin-token", timeout_s=2) as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: "trying again" in status(app))
            async with FakeAdminServer(port=port) as srv:
                srv.service.put(node("back"))
                await wait_until(pilot, lambda: "back" in rows(app), tries=200)
                assert not app.screen.query_one("#status").has_class("-error")
                await wait_until(pilot, lambda: srv.service.watchers == 1, tries=200)
                srv.service.put(node("back", state="not_ready"))
                await wait_until(pilot, lambda: state_of(app, "back") == "not_ready")


async def test_a_gatewayd_restart_is_ridden_over_with_what_changed_meanwhile():
    first = await FakeAdminServer().start()
    first.service.put(node("gpu-1"))
    async with first.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: first.service.watchers == 1)
            await first.stop()
            await wait_until(pilot, lambda: "trying again in" in status(app))
            # What changed while it was down comes with no event: the list is read again.
            async with FakeAdminServer(port=first.port) as second:
                second.service.put(node("gpu-1", state="not_ready", reason="restarted"))
                await wait_until(pilot, lambda: state_of(app, "gpu-1") == "not_ready", tries=200)
                assert not app.screen.query_one("#status").has_class("-error")


async def test_a_refused_token_is_said_plainly(server):
    async with server.client(token="wrong") as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: "the admin token was refused" in status(app))
            assert "secrets/admin-token" in status(app)
            assert app.is_running


async def test_enter_on_a_row_shows_the_node_details_and_escape_closes_them(server):
    server.service.put(node("gpu-1", gpus=2))
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(table(app).rows) == 1)
            table(app).focus()
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, NodeDetails))
            body = details_text(app)
            for text in ("gpu-1.lab", "debian 12", "AVX2: yes", "GPUs", "0000:01:00.0"):
                assert text in body

            # The open details follow the watch too.
            await wait_until(pilot, lambda: server.service.watchers == 1)
            server.service.put(node("gpu-1", gpus=2, state="not_ready", reason="unplugged"))
            await wait_until(pilot, lambda: "unplugged" in details_text(app))

            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, NodesScreen))


async def test_r_reads_the_list_again(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.screen.query_one("#empty").display)
            # Changed behind the watch's back (no event): only a reload can see it.
            server.service.nodes["quiet"] = node("quiet")
            await pilot.press("r")
            await wait_until(pilot, lambda: "quiet" in rows(app))


async def test_a_client_factory_is_called_inside_the_app(server):
    # Regression guard: a client made before the app's loop ran bound its grpclib
    # channel to another loop and never connected; the app must call the factory itself.
    made: list[AdminClient] = []

    def factory() -> AdminClient:
        made.append(server.client())
        return made[-1]

    server.service.put(node("n1"))
    app = LlmgwApp(factory, first_screen="nodes")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "n1" in rows(app))
    assert len(made) == 1


def test_run_console_without_a_server_yaml_raises_before_drawing(tmp_path):
    with pytest.raises(ConfigError) as e:
        run_console(Paths.under(tmp_path))
    assert "server.yaml" in str(e.value)


# ---- the pane under the table ----------------------------------------------------


def pane_text(renderable) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


async def test_the_pane_says_what_the_host_warns_of_and_what_it_could_not_read(server):
    old = node("old-cpu")
    old.host.avx2 = False  # a recorded inventory: the flag, not the agent's warning
    server.service.put(old)
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            body = app.screen.query_one("#node-pane-body", Static)
            await wait_until(pilot, lambda: "AVX2" in pane_text(body.content))
            text = pane_text(body.content)
            assert "CPU has no AVX2: llama.cpp CPU builds will be slow" in text
            # This server has no replicas or engines to tell: said, not a failure of the list.
            assert "Engines: none reported yet" in text
            assert "Nodes: 1 (1 ready)" in status(app)


def test_a_drain_counts_the_replicas_left_to_move_and_those_stopping():
    view = node("gpu-1", gpus=2)
    view.cordoned = view.draining = True
    replicas = [
        ReplicaView(replica_id="a", node_id="gpu-1", gpu_indexes=[0], state="ready"),
        ReplicaView(replica_id="b", node_id="gpu-1", gpu_indexes=[1], state="draining"),
        ReplicaView(replica_id="c", node_id="elsewhere", gpu_indexes=[0], state="ready"),
        ReplicaView(replica_id="d", node_id="gpu-1", state="stopped"),
    ]
    drain = drain_of("gpu-1", replicas, seen_total=3)
    assert (drain.total, drain.left, drain.stopping, drain.done) == (3, 1, 1, False)
    text = pane_text(node_pane(view, replicas, [], drain))
    assert "Draining" in text and "2 of 3 moved · 1 left to move, 1 stopping" in text
    assert "GPU 0" in text and "a ready" in text and "b draining" in text and "c " not in text

    done = drain_of("gpu-1", [], seen_total=3)
    assert done.done
    assert "Drained: nothing runs on gpu-1" in pane_text(node_pane(view, [], [], done))
