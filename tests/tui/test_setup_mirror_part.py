"""The setup screens' Model mirror part: turned on, set, and the same install as its command."""

from __future__ import annotations

from textual.widgets import Input

from llmgw.setup.plan import PART_IDS
from tests.llmgw.test_setup_plan import BIG
from tests.tui.test_setup_console import SMALL_TERMINAL, parts_shown, plan_checked, prompt, text_of
from tui.setup.app import SetupConsole
from tui.setup.dialogs import MirrorDialog
from tui.setup.parts import PartsScreen


async def test_the_mirror_part_turns_on_takes_its_address_and_quota_and_shows_in_the_command(
    tmp_path,
) -> None:
    from llmgw.paths import Paths

    app = SetupConsole(Paths.under(tmp_path / "home"), machine=BIG)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        assert prompt(app, "mirror").startswith("[ ] Model mirror")
        await pilot.press(*["down"] * PART_IDS.index("mirror"), "space")
        assert app.plan.mirror.on is True
        assert "a mirror on 0.0.0.0:7080 (no quota)" in prompt(app, "mirror")

        await pilot.press("enter")
        assert isinstance(app.screen, MirrorDialog)
        app.screen.query_one("#mirror-listen", Input).value = "0.0.0.0:7181"
        app.screen.query_one("#mirror-max-bytes", Input).value = "lots"
        await pilot.press("enter")
        # A quota the part cannot read stays in the form, said in its words.
        assert isinstance(app.screen, MirrorDialog)
        assert "not a size" in text_of(app, "#form-status")
        app.screen.query_one("#mirror-max-bytes", Input).value = "200G"
        await pilot.press("enter")
        assert isinstance(app.screen, PartsScreen)
        assert app.plan.mirror.listen == "0.0.0.0:7181"
        assert app.plan.mirror.max_bytes == 200 * 10**9
        assert "quota 200 GB" in prompt(app, "mirror")

        await pilot.press("p")
        await plan_checked(pilot, app)
        command = text_of(app, "#plan-command")
        assert "--mirror --mirror-listen 0.0.0.0:7181" in command
        assert "--mirror-max-bytes 200000000000" in command


async def test_the_mirror_s_plain_http_choice_is_a_checkbox_and_its_flag(tmp_path) -> None:
    from textual.widgets import Checkbox

    from llmgw.paths import Paths

    app = SetupConsole(Paths.under(tmp_path / "home"), machine=BIG)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        await pilot.press(*["down"] * PART_IDS.index("mirror"), "space")
        assert "HTTPS" in prompt(app, "mirror")
        await pilot.press("enter")
        assert isinstance(app.screen, MirrorDialog)
        box = app.screen.query_one("#mirror-plain-http", Checkbox)
        assert box.value is False  # HTTPS with the cluster CA unless asked otherwise
        box.value = True
        app.screen.query_one("#mirror-listen", Input).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, PartsScreen)
        assert app.plan.mirror.plain_http is True
        assert "plain HTTP" in prompt(app, "mirror")
        await pilot.press("p")
        await plan_checked(pilot, app)
        assert "--mirror-plain-http" in text_of(app, "#plan-command")
