"""The Settings screen against a real in-process gatewayd, driven by Textual's pilot.

The same screen against the parity cluster, compared with ``ctl config``:
tests/tui/parity/test_parity.py (tests/tui/parity/settings.py).
"""

from __future__ import annotations

from textual.widgets import DataTable, Input

from tests.cluster_fixture import running_cluster
from tests.tui.kit.pilot import text, wait_until
from tui.app import LlmgwApp
from tui.screens.settings.settings import SettingsScreen

SIZE = (160, 48)


def history(app: LlmgwApp) -> list[str]:
    t = app.screen.query_one("#settings-history", DataTable)
    return [str(k.value) for k in t.rows]


async def _change(app: LlmgwApp, pilot, key: str, value: str) -> None:
    await pilot.press("e")
    await wait_until(pilot, lambda: app.screen.__class__.__name__ == "SettingDialog")
    app.screen.query_one("#setting-key", Input).value = key
    app.screen.query_one("#setting-value", Input).value = value
    await pilot.click("#form-ok")


async def test_a_change_is_kept_a_bad_value_is_refused_by_key_and_a_version_rolled_back(tmp_path):
    async with running_cluster(tmp_path) as c, c.admin() as client:
        app = LlmgwApp(client, first_screen="settings")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen))
            await wait_until(pilot, lambda: history(app) == ["1"])
            assert "version 1 · by server.yaml" in text(app, "#status")
            assert "max_queue: 1000" in text(app, "#settings-doc")
            # Nothing to roll back to yet: the newest version is selected.
            assert app.screen.check_action("rollback", ()) is None

            # A key that is no key is refused in the form, in ctl's words.
            await _change(app, pilot, "router..admission", "1")
            assert "is not a key" in text(app, "#form-status")
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen))

            # A bad value: gatewayd refuses it naming the key and what it expects.
            await _change(app, pilot, "router.admission.bands[0].queue_ttl", "-1")
            await wait_until(pilot, lambda: "must be greater than 0" in text(app, "#action-line"))
            assert "router.admission.bands[0].queue_ttl" in text(app, "#action-line")
            assert history(app) == ["1"]

            await _change(app, pilot, "router.admission.bands[0].max_queue", "7")
            await wait_until(pilot, lambda: history(app) == ["2", "1"])
            assert "Kept: version 2" in text(app, "#action-line")
            assert c.server.gateway.bands.config.bands[0].max_queue == 7
            await wait_until(pilot, lambda: "max_queue: 7" in text(app, "#settings-doc"))
            # The pane: what the selected (newest) version changed.
            await wait_until(pilot, lambda: "1000 → 7" in text(app, "#settings-diff"))

            table = app.screen.query_one("#settings-history", DataTable)
            table.move_cursor(row=table.get_row_index("1"))
            await wait_until(pilot, lambda: app.screen.check_action("rollback", ()) is True)
            await pilot.press("R")
            await wait_until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
            await pilot.press("y")
            await wait_until(pilot, lambda: history(app) == ["3", "2", "1"])
            assert "Rolled back: version 3" in text(app, "#action-line")
            assert c.server.gateway.bands.config.bands[0].max_queue == 1000
