"""The Settings screen, its change and its rollback against a live cluster, for tests/tui/parity/test_parity.py.

The screen is compared with ``ctl config get`` (its head and the whole
document), ``ctl config history`` (the table, drawn with the same cells) and
``ctl config diff A B`` of the selected version (the pane). Its change keeps
a new version through the dialog and ``ctl config get`` then says it; its
rollback keeps an earlier version again after asking and ``ctl config
history`` shows it. The key changed is one no node has, so the other screens'
tests see the cluster as it was. ``SCREENS`` and ``ACTIONS`` are in the shape
of ``kit``'s.
"""

from __future__ import annotations

from textual.widgets import Input

from llmgw.present.settingsfmt import history_cells, in_force_lines, version_line
from proto.llmgw.v1 import SettingsDiffReply, SettingsHistoryReply, SettingsReply
from tests.tui.parity.kit import (
    Live,
    Step,
    agree,
    cells,
    cursor_to,
    plain,
    press,
    screen_is,
    static_text,
    table_rows,
    to_mode,
    until,
)
from tui.parity import Item
from tui.screens.settings.settings import diff_body

# No node has this id: changing its settings changes nothing the other tests look at.
KEY = "agents.nodes.parity-nobody.log_level"


async def to_settings(app, pilot, live: Live) -> None:
    await to_mode(pilot, "settings")


def _history_said(reply: dict) -> dict[str, list[str]]:
    h = SettingsHistoryReply.from_dict(reply)
    return {str(v.version): cells(history_cells(v, h.in_force_version)) for v in h.versions}


async def check_settings(app, pilot, live: Live) -> None:
    item = ("SettingsScreen", None)
    reload = app.screen.reload

    async def history_said() -> dict[str, list[str]]:
        return _history_said(await live.said(item, 1))

    rows = await agree(
        pilot, lambda: table_rows(app, "#settings-history"), history_said, again=reload
    )
    assert "1" in rows

    async def head_said() -> tuple[str, str]:
        reply = SettingsReply.from_dict(await live.said(item, 0))
        doc = reply.value_yaml
        return (
            "\n".join(in_force_lines(reply.in_force, reply.latest_version)),
            f"{version_line(reply.version)}|{'router:' in doc and 'agents:' in doc}",
        )

    def head_shown() -> tuple[str, str]:
        status = static_text(app, "#status")
        doc = static_text(app, "#settings-doc")
        head = status.removeprefix("Settings: ").split(" · ")[:-3]
        return (
            static_text(app, "#settings-in-force").rstrip("\n"),
            f"{' · '.join(head)}|{'router:' in doc and 'agents:' in doc}",
        )

    await agree(pilot, head_shown, head_said, again=reload)

    # The pane: the selected version against the one it was made from.
    newest = max(rows, key=int)
    await cursor_to(pilot, "#settings-history", newest)

    async def diff_said() -> str:
        to = int(newest)
        reply = SettingsDiffReply.from_dict(await live.said(item, 2, **{"from": to - 1, "to": to}))
        return plain(diff_body(reply))

    text = await agree(pilot, lambda: static_text(app, "#settings-diff"), diff_said)
    assert f"→ version {newest}" in text


async def do_change(app, pilot, live: Live) -> None:
    item = ("SettingsScreen", "change")
    await to_settings(app, pilot, live)
    await until(pilot, lambda: app.screen.check_action("change", ()) is True)
    before = SettingsReply.from_dict(await live.shown_by(item, key=KEY))
    value = "warning" if "debug" in before.value_yaml else "debug"
    await press(pilot, *item, "SettingDialog")
    app.screen.query_one("#setting-key", Input).value = KEY
    app.screen.query_one("#setting-value", Input).value = value
    app.screen.query_one("#setting-comment", Input).value = "from the console"
    await pilot.click("#form-ok")
    await until(pilot, lambda: screen_is(app, "SettingsScreen"))
    await until(pilot, lambda: "Kept: " in static_text(app, "#action-line"))
    said = SettingsReply.from_dict(await live.ctl(("ctl", "config", "get", KEY)))
    assert said.value_yaml == value and said.version.comment == "from the console"
    assert said.version.version == before.latest_version + 1
    assert f"version {said.version.version}" in static_text(app, "#action-line")


async def do_rollback(app, pilot, live: Live) -> None:
    item = ("SettingsScreen", "rollback")
    # Something to roll back from: a version after the one to go back to.
    start = await live.client.get_settings()
    await live.client.set_settings([f"{KEY}=error"], comment="to be rolled back")
    await to_settings(app, pilot, live)
    back_to = str(start.version.version)
    await cursor_to(pilot, "#settings-history", back_to)
    await until(pilot, lambda: app.screen.check_action("rollback", ()) is True)
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: screen_is(app, "SettingsScreen"))
    await until(pilot, lambda: "Rolled back: " in static_text(app, "#action-line"))
    history = await live.shown_by(item)
    newest = history["versions"][0]
    assert newest["comment"] == f"back to version {back_to}"
    again = await live.client.get_settings(KEY)
    assert (
        again.value_yaml == (await live.client.get_settings(KEY, version=int(back_to))).value_yaml
    )


SCREENS: dict[str, tuple[Step, Step | None]] = {
    "SettingsScreen": (to_settings, check_settings),
}
ACTIONS: dict[Item, Step] = {
    ("SettingsScreen", "change"): do_change,
    ("SettingsScreen", "rollback"): do_rollback,
}
