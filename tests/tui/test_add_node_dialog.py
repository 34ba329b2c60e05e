"""The Nodes screen's Add node dialog (``a``): node add's form, each step as it goes, and its fixes.

The node is the in-process asyncssh fake of tests/llmgw/onboard/fake_node.py;
the control plane's files are a fresh ``init_server``. No gatewayd answers
here, so a run that gets through join stops at register, which says why;
tests/tui/parity/test_parity.py adds a node that registers with a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Input

from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from tests.llmgw.onboard.fake_node import Scenario, start_fake_node, stop_fake_node
from tests.tui.kit.fake_admin import FakeAdminServer
from tests.tui.kit.pilot import text, wait_until
from tui.app import LlmgwApp
from tui.screens.nodes.add_node import AddNodeDialog

SIZE = (120, 40)


@pytest.fixture
def cp_paths(tmp_path) -> Paths:
    paths = Paths.under(tmp_path / "cp")
    init_server(paths, hosts=["localhost"])
    return paths


@contextlib.asynccontextmanager
async def listening():
    """A TCP port on 127.0.0.1 standing in for the control plane's agent port."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def open_dialog(pilot: Pilot) -> AddNodeDialog:
    app = pilot.app
    await wait_until(pilot, lambda: type(app.screen).__name__ == "NodesScreen")
    await pilot.press("a")
    await wait_until(pilot, lambda: isinstance(app.screen, AddNodeDialog))
    return app.screen  # type: ignore[return-value]


def fill(dialog: AddNodeDialog, node, tmp_path, **fields: str) -> None:
    values = {
        "host": "127.0.0.1",
        "port": str(node.port),
        "identity": str(node.client_key_file),
        "known-hosts": str(node.known_hosts_file),
        "node-id": "gpu-a-01",
        "root": str(tmp_path / "root"),
        **fields,
    }
    for name, value in values.items():
        dialog.query_one(f"#add-{name}", Input).value = value


def ended(dialog: AddNodeDialog) -> bool:
    return bool(dialog.events) and dialog.events[-1].step == "result"


async def test_add_node_runs_node_add_and_shows_each_step_and_the_failures_fix(tmp_path, cp_paths):
    node = await start_fake_node(tmp_path, Scenario())
    try:
        async with FakeAdminServer() as server, listening() as cp:
            app = LlmgwApp(server.client(), first_screen="nodes", paths=cp_paths)
            async with app.run_test(size=SIZE) as pilot:
                # No nodes yet: a needs none selected.
                dialog = await open_dialog(pilot)
                fill(dialog, node, tmp_path, planes=cp)
                await pilot.click("#add-button")
                await wait_until(pilot, lambda: ended(dialog))
                log = text(app, "#add-log")
                # Every step in the command's words, in order, up to register.
                for line in (
                    "✓ connect   logged in as root",
                    "✓ doctor    package manager: apt-get",
                    "✓ install   llmgw ",
                    "✓ packages  installed libgomp1 with apt-get",
                    "! join      no systemd on this machine",
                ):
                    assert line in log, line
                assert log.index("connect") < log.index("doctor") < log.index("install")
                assert log.index("packages") < log.index("join") < log.index("register")
                # A warning carries its fix under it.
                assert "fix: nothing restarts it after a crash or reboot" in log
                assert text(app, "#add-step").strip() == "step 7 of 7: register"
                # No gatewayd here: register fails, with what to do, and nothing crashed.
                result = text(app, "#add-result")
                assert "this control plane's admin API does not answer" in result
                assert "Traceback" not in log + result
                assert str(dialog.query_one("#add-button", Button).label) == "Try again"
                assert node.scenario.installed == {"libgomp1"}
                # Try again shows the form as typed, to change what the fix says.
                await pilot.click("#add-button")
                assert dialog.query_one("#add-form").display
                assert dialog.query_one("#add-node-id", Input).value == "gpu-a-01"
    finally:
        await stop_fake_node(node)


async def test_a_login_without_passwordless_sudo_shows_the_sudoers_fix(tmp_path, cp_paths):
    node = await start_fake_node(tmp_path, Scenario(uid=1000, sudo_ok=False))
    try:
        async with FakeAdminServer() as server, listening() as cp:
            app = LlmgwApp(server.client(), first_screen="nodes", paths=cp_paths)
            async with app.run_test(size=SIZE) as pilot:
                dialog = await open_dialog(pilot)
                fill(dialog, node, tmp_path, user="ops", planes=cp)
                await pilot.click("#add-button")
                await wait_until(pilot, lambda: ended(dialog))
                fail = next(ev for ev in dialog.events if ev.status == "fail")
                assert fail.step == "connect"
                log = text(app, "#add-log")
                assert "✗ connect   ops on 127.0.0.1 is not root and cannot use sudo" in log
                assert "fix: log in as root (--user root)" in log and "NOPASSWD" in log
                assert "step 1 of 7: connect" in text(app, "#add-step")
                assert "NOPASSWD" in text(app, "#add-result")
                # Nothing was installed on a machine it could not become root on.
                assert not any("pip" in c or "apt-get" in c for c in node.commands)
    finally:
        await stop_fake_node(node)


async def test_a_form_mistake_stays_in_the_dialog_and_escape_closes_it(tmp_path, cp_paths):
    async with FakeAdminServer() as server:
        app = LlmgwApp(server.client(), first_screen="nodes", paths=cp_paths)
        async with app.run_test(size=SIZE) as pilot:
            dialog = await open_dialog(pilot)
            # Without a host nothing runs; a wheelhouse must be a folder, as the command says.
            await pilot.click("#add-button")
            assert "give the host" in text(app, "#add-status")
            dialog.query_one("#add-host", Input).value = "gpu-a-01.lab"
            dialog.query_one("#add-wheelhouse", Input).value = str(tmp_path / "none")
            # A button ignores a click while it still shows the last one (0.2 s).
            await pilot.pause(0.3)
            await pilot.click("#add-button")
            await pilot.pause()
            assert f"wheelhouse: {tmp_path / 'none'} is not a folder" in text(app, "#add-status")
            assert not dialog.events
            # The default control plane address is the command's: none is known here.
            planes = dialog.query_one("#add-planes", Input).placeholder
            assert "no address for nodes to dial is known" in planes
            await pilot.press("escape")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "NodesScreen")


async def test_without_the_control_planes_files_the_dialog_says_where_to_run_it():
    async with FakeAdminServer() as server:
        app = LlmgwApp(server.client(), first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            dialog = await open_dialog(pilot)
            said = text(app, "#add-status")
            assert "runs where the control plane's files are" in said
            assert "sudo llmgw" in said and "LLMGW_HOME=DIR llmgw" in said
            assert "llmgw node add HOST" in said
            assert dialog.query_one("#add-button", Button).disabled
            assert not dialog.query_one("#add-form").display
            await pilot.press("escape")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "NodesScreen")
