"""The setup screens know standbys: the control plane's settings take them, the parts list and the
same install as a command show them (``server init --standbys``), and the plan refuses them on SQLite."""

from __future__ import annotations

from textual.widgets import Input

from llmgw.paths import Paths
from llmgw.setup.plan import StorePart, to_command
from tests.llmgw.test_setup_plan import BIG
from tests.tui.test_setup_console import SMALL_TERMINAL, parts_shown, prompt
from tui.setup.app import SetupConsole
from tui.setup.dialogs import ControlPlaneDialog
from tui.setup.parts import PartsScreen


async def test_standbys_typed_in_the_control_plane_s_settings_go_into_the_command(tmp_path):
    app = SetupConsole(Paths.under(tmp_path / "home"), machine=BIG)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        await pilot.press("enter")
        assert isinstance(app.screen, ControlPlaneDialog)
        app.screen.query_one("#cp-standbys", Input).value = "cp-b.example, 10.0.0.3"
        app.screen.query_one("#cp-name", Input).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, PartsScreen)
        assert app.plan.control_plane.standbys == ("cp-b.example", "10.0.0.3")
        assert "standing by: cp-b.example, 10.0.0.3" in prompt(app, "control_plane")
    plan = app.plan.with_part(
        "store", StorePart(kind="postgres", dsn="postgresql://llmgw@db.example/llmgw")
    )
    argv = to_command(plan)
    at = [i for i, w in enumerate(argv) if w == "--standbys"]
    assert [argv[i + 1] for i in at] == ["cp-b.example", "10.0.0.3"]
