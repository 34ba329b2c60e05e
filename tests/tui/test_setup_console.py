"""The setup screens, driven by Textual's pilot in a terminal 80×24 (and a large one)."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil
import pytest
from textual.widgets import Button, Input, OptionList, Static

from llmgw.config import load_agent_config, load_server_config
from llmgw.paths import Paths
from llmgw.setup.plan import PART_IDS, shell_text
from tests.llmgw.test_setup_plan import BIG, SMALL, free_port
from tests.tui.test_nodes_screen import wait_until
from tui.setup.app import SetupConsole
from tui.setup.dialogs import ControlPlaneDialog, NodeDialog, StoreDialog
from tui.setup.parts import PartsScreen
from tui.setup.plan import PlanScreen
from tui.setup.run import RunScreen

SMALL_TERMINAL = (80, 24)
LARGE_TERMINAL = (160, 48)


@pytest.fixture
def paths(tmp_path) -> Paths:
    return Paths.under(tmp_path / "home")


def text_of(app: SetupConsole, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def prompt(app: SetupConsole, part_id: str) -> str:
    return str(app.screen.query_one("#parts", OptionList).get_option(part_id).prompt)


async def parts_shown(pilot, app: SetupConsole) -> None:
    def shown() -> bool:
        """the parts list"""
        if not isinstance(app.screen, PartsScreen):
            return False
        return app.screen.query_one("#parts", OptionList).option_count == len(PART_IDS)

    await wait_until(pilot, shown)


async def plan_checked(pilot, app: SetupConsole) -> PlanScreen:
    await wait_until(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.checked)
    await pilot.pause()
    return app.screen


async def run_ended(pilot, app: SetupConsole, *, tries: int = 1200) -> RunScreen:
    await wait_until(
        pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.ended, tries=tries
    )
    await pilot.pause()
    return app.screen


async def test_space_toggles_the_highlighted_part(paths) -> None:
    app = SetupConsole(paths, machine=BIG)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        assert prompt(app, "starter").startswith("[x] Starter model")
        await pilot.press("down", "down", "down", "space")
        assert app.plan.starter.on is False
        assert prompt(app, "starter").startswith("[ ] Starter model")
        assert "no model until one is added" in prompt(app, "starter")
        await pilot.press("space")
        assert app.plan.starter.on is True
        # Admin access comes in with the group of whoever runs setup.
        await pilot.press("down", "down", "space")
        assert app.plan.admin.on and app.plan.admin.group
        assert f"group {app.plan.admin.group}" in prompt(app, "admin")


async def test_enter_opens_a_part_s_settings_and_enter_there_keeps_them(paths) -> None:
    app = SetupConsole(paths, machine=BIG)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        await pilot.press("enter")
        assert isinstance(app.screen, ControlPlaneDialog)
        await pilot.press(*"lab", "enter")  # typed over the cluster name
        assert isinstance(app.screen, PartsScreen)
        assert app.plan.control_plane.cluster_name == "lab"
        assert "cluster lab" in prompt(app, "control_plane")

        # A node id the checks refuse stays in the form, said in their words.
        await pilot.press("down", "down", "enter")
        assert isinstance(app.screen, NodeDialog)
        app.screen.query_one("#node-id", Input).value = "../evil"
        await pilot.press("enter")
        assert isinstance(app.screen, NodeDialog)
        assert "node id '../evil'" in text_of(app, "#form-status")
        await pilot.press("escape")
        assert isinstance(app.screen, PartsScreen)
        assert app.plan.node.node_id == "cp-1"


async def test_the_mouse_turns_a_part_off_in_its_settings_and_opens_the_plan(paths) -> None:
    app = SetupConsole(paths, machine=BIG)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        await pilot.press("down", "down", "enter")
        assert isinstance(app.screen, NodeDialog)
        await pilot.click("#part-on")
        await pilot.click("#form-ok")
        assert isinstance(app.screen, PartsScreen)
        assert app.plan.node.on is False
        assert prompt(app, "node").startswith("[ ] This machine as a node")
        await pilot.click("#to-plan")
        screen = await plan_checked(pilot, app)
        assert "--no-node" in text_of(app, "#plan-command")
        assert "This machine as a node" in text_of(app, "#plan-out")
        assert screen.can_run


@pytest.mark.parametrize("size", [SMALL_TERMINAL, LARGE_TERMINAL])
async def test_the_plan_page_shows_the_same_install_as_a_command(paths, size) -> None:
    app = SetupConsole(paths, machine=BIG)
    async with app.run_test(size=size) as pilot:
        await parts_shown(pilot, app)
        await pilot.press("p")
        await plan_checked(pilot, app)
        command = text_of(app, "#plan-command")
        assert command == shell_text(app.plan, home=str(paths.home))
        assert command.startswith(f"LLMGW_HOME={paths.home} llmgw server init --name llmgw")
        assert "Control plane" in text_of(app, "#plan-in")
        assert "Admin access" in text_of(app, "#plan-out")
        assert "✓ The plan fits this machine." in text_of(app, "#plan-checks")
        assert not app.screen.query_one("#plan-run", Button).disabled
        await pilot.press("escape")
        assert isinstance(app.screen, PartsScreen)


async def test_a_refused_plan_disables_run_and_names_the_flags_that_avoid_it(paths) -> None:
    app = SetupConsole(paths, machine=SMALL)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        await pilot.press("p")
        screen = await plan_checked(pilot, app)
        checks = text_of(app, "#plan-checks")
        assert "gemma-3-270m" in checks
        assert "leave it out with --no-starter or --no-node" in checks
        assert app.screen.query_one("#plan-run", Button).disabled
        await pilot.press("r")
        assert app.screen is screen  # nothing runs

        await pilot.press("escape", "down", "down", "down", "space", "p")
        await plan_checked(pilot, app)
        assert "--no-starter" in text_of(app, "#plan-command")
        assert not app.screen.query_one("#plan-run", Button).disabled


@pytest.mark.parametrize("size", [SMALL_TERMINAL, LARGE_TERMINAL])
async def test_running_the_plan_sets_the_machine_up_and_says_what_next(paths, size) -> None:
    # This machine, read for real; the cluster is not started (start=False).
    app = SetupConsole(paths, start=False)
    async with app.run_test(size=size) as pilot:
        await parts_shown(pilot, app)
        await pilot.press("p")
        await plan_checked(pilot, app)
        plan = app.plan
        await pilot.press("r")
        screen = await run_ended(pilot, app)
        assert screen.ended.ok, text_of(app, "#run-steps")
        steps = text_of(app, "#run-steps")
        assert "✓ Write the CA, certificates, admin token and server.yaml" in steps
        assert f"node {plan.node.node_id}: {paths.agent_yaml}" in steps
        nxt = text_of(app, "#run-next")
        assert "This machine is set up" in nxt
        assert f"LLMGW_HOME={paths.home} llmgw up" in nxt
        assert not app.screen.query_one("#run-open", Button).display
        await pilot.press("c")  # nothing runs yet: there is no console to open
        assert app.is_running
        await pilot.click("#run-quit")
    assert app.return_value is False
    cfg = load_server_config(paths.server_yaml)
    assert cfg.listen.http.endswith(f":{plan.control_plane.http_port}")
    assert cfg.setup.node and cfg.setup.project == plan.limits.project
    assert load_agent_config(paths.agent_yaml).node_id == plan.node.node_id


async def test_a_failed_step_says_why_and_leads_back_to_the_parts(paths) -> None:
    paths.config_dir.mkdir(parents=True)
    paths.server_yaml.write_text("listen: [not, a, mapping]\n")
    app = SetupConsole(paths, machine=BIG.model_copy(update={"configured": True}), start=False)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        await pilot.press("p")
        await plan_checked(pilot, app)
        assert "already set up here" in text_of(app, "#plan-checks")
        await pilot.press("r")
        await run_ended(pilot, app)
        steps = text_of(app, "#run-steps")
        assert "✗ Write the CA" in steps and "server.yaml" in steps
        assert "- Write agent.yaml" in steps
        assert "stopped at the step marked ✗" in text_of(app, "#run-next")
        await pilot.press("b")
        assert isinstance(app.screen, PartsScreen)


def _stop_cluster(paths: Paths) -> None:
    """Stop the `llmgw up` the run started, as an operator would (SIGTERM), and its children."""
    pid_file = paths.run_dir / "up.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
        str(paths.home) in " ".join(p.info["cmdline"] or [])
        for p in psutil.process_iter(["cmdline"])
    ):
        time.sleep(0.2)


@pytest.mark.timeout(400)
async def test_the_run_starts_the_cluster_until_the_node_and_the_starter_are_ready(paths):
    # The acceptance path: setup → plan → run → the cluster console opens.
    app = SetupConsole(paths)
    try:
        async with app.run_test(size=SMALL_TERMINAL) as pilot:
            await parts_shown(pilot, app)
            if not app.machine.starter_installed:
                pytest.skip("the starter extra is not installed")
            await pilot.press("p")
            await plan_checked(pilot, app)
            await pilot.press("r")
            screen = await run_ended(pilot, app, tries=7000)
            steps = text_of(app, "#run-steps")
            assert screen.ended.ok, steps
            assert f"node {app.plan.node.node_id} is ready" in steps
            assert "gemma-3-270m is ready at http://" in steps
            assert "project local/default/default" in steps
            assert "c opens the cluster console" in text_of(app, "#run-next")
            await pilot.press("c")
        assert app.return_value is True
    finally:
        _stop_cluster(paths)


async def test_a_postgresql_store_that_does_not_answer_is_said_so_and_refused(paths) -> None:
    dead = f"postgresql://llmgw@127.0.0.1:{free_port()}/llmgw"
    app = SetupConsole(paths, machine=BIG)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        await pilot.press("down", "enter")
        assert isinstance(app.screen, StoreDialog)
        await pilot.click("#store-pg")
        app.screen.query_one("#store-dsn", Input).value = dead
        await pilot.click("#store-check")
        await wait_until(pilot, lambda: "nothing answers" in text_of(app, "#store-answer"))
        await pilot.click("#form-ok")
        assert app.plan.store.kind == "postgres" and app.plan.store.dsn == dead
        assert "PostgreSQL at 127.0.0.1" in prompt(app, "store")
        await pilot.press("p")
        await plan_checked(pilot, app)
        assert "nothing answers as PostgreSQL at 127.0.0.1" in text_of(app, "#plan-checks")
        assert f"--store-dsn {dead}" in text_of(app, "#plan-command")
        assert app.screen.query_one("#plan-run", Button).disabled
