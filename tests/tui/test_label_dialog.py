"""The Nodes screen's Label dialog (``l``): checked as ``ctl node label`` checks, nothing sent until sound.

What it sends and how the row follows is tests/tui/parity/test_parity.py's (a real
cluster); here, what it refuses, in the command's words.
"""

from __future__ import annotations

from textual.widgets import Input

from tests.tui.kit.fake_admin import FakeAdminServer, node
from tests.tui.kit.pilot import text, wait_until
from tui.app import LlmgwApp
from tui.screens.nodes.label_dialog import LabelDialog
from tui.screens.nodes.nodes import NodesScreen

SIZE = (120, 40)


async def test_the_label_dialog_refuses_what_is_not_a_label_and_sends_nothing():
    async with FakeAdminServer() as server:
        view = node("gpu-1")
        view.labels = {"zone": "a"}
        server.service.put(view)
        async with server.client() as client:
            app = LlmgwApp(client, first_screen="nodes")
            async with app.run_test(size=SIZE) as pilot:
                await wait_until(pilot, lambda: isinstance(app.screen, NodesScreen))
                await wait_until(pilot, lambda: app.screen.selected_node() is not None)
                await pilot.press("l")
                await wait_until(pilot, lambda: isinstance(app.screen, LabelDialog))
                assert "Now: zone=a" in text(app, "#label-now")

                await pilot.press("enter")  # nothing given
                assert isinstance(app.screen, LabelDialog)
                assert "give labels to set (KEY=VALUE) or keys to remove" in text(
                    app, "#form-status"
                )

                app.screen.query_one("#label-set", Input).value = "zone"
                await pilot.press("enter")
                assert isinstance(app.screen, LabelDialog)
                assert "'zone' is not KEY=VALUE" in text(app, "#form-status")

                app.screen.query_one("#label-set", Input).value = ""
                app.screen.query_one("#label-rm", Input).value = "no!"
                await pilot.press("enter")
                assert "label key 'no!'" in text(app, "#form-status")

                await pilot.press("escape")
                await wait_until(pilot, lambda: isinstance(app.screen, NodesScreen))
