"""The Settings screen: the cluster's kept settings, their versions, and changing them.

It shows what ``llmgw ctl config get`` prints (the newest version with who
made it, when and why, what runs on this control plane and on each node, and
the whole document as YAML), ``llmgw ctl config history`` as a table, and,
under it, ``llmgw ctl config diff`` of the selected version against the one
it was made from. ``e`` changes one key (``config set KEY=VALUE``), checked
as a whole by gatewayd and refused naming the key and what it expects; ``R``
keeps the selected version again as a new one after asking (``config
rollback N``). Another control plane's change arrives through the store, so
the screen reads again every ``REFRESH_S`` while shown, after each change
and on r.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.settingsfmt import (
    HISTORY_COLUMNS,
    NO_CHANGE,
    author,
    change_text,
    history_cells,
    in_force_lines,
    value_text,
    version_line,
)
from proto.llmgw.v1 import (
    SettingsDiffReply,
    SettingsHistoryReply,
    SettingsReply,
    SettingsVersionView,
    SettingsWritten,
)
from tui.screens.common import AdminFailed, Answered, Refused, describe, show_worker_error
from tui.screens.dialogs import Confirm
from tui.screens.live import LiveRows, Rereads, selected_key, show_text
from tui.screens.settings.setting_dialog import SettingChange, SettingDialog
from tui.screens.shell import KeyFooter, ShellHeader

# 5 s: a change made on another control plane shows within this while one watches.
REFRESH_S = 5.0


def keys_of(columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(c.lower() for c in columns)


@dataclass
class SettingsRead:
    """One read of the screen: ``ctl config get`` and ``ctl config history``."""

    settings: SettingsReply
    history: SettingsHistoryReply


class SettingsRefused(Refused):
    """gatewayd refused what the screen asked (``action``), or could not be asked."""

    def __init__(self, action: str, error: LlmgwError) -> None:
        super().__init__(error)
        self.action = action


def diff_body(reply: SettingsDiffReply) -> Text:
    """What ``ctl config diff A B`` says, one change a line."""
    text = Text(f"version {reply.from_version} → version {reply.to_version}: ", style="bold")
    if not reply.changes:
        text.append("no differences", style="dim")
        return text
    text.append(f"{len(reply.changes)} change(s)")
    for c in reply.changes:
        text.append("\n")
        text.append_text(change_text(c))
    return text


def written_text(action: str, reply: SettingsWritten) -> str:
    """What a change or a rollback did, in words."""
    if reply.unchanged:
        return NO_CHANGE
    v = reply.version
    keys = ", ".join(c.key for c in reply.changes)
    verb = "Rolled back" if action == "rollback" else "Kept"
    return f"{verb}: {version_line(v)} ({keys}); the other control planes take it within seconds."


class SettingsScreen(Rereads, Screen[None]):
    """The kept settings in force, every version of them, and a change's difference."""

    DEFAULT_CSS = """
    #settings-history { height: auto; max-height: 40%; min-height: 3; }
    #settings-in-force, #settings-diff { height: auto; padding: 0 1; }
    #settings-diff { margin-bottom: 1; }
    #settings-doc-box { height: 1fr; border-top: solid $panel-lighten-2; }
    #settings-doc { padding: 0 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e", "change", "Change a key"),
        Binding("R", "rollback", "Roll back to"),
    ]

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._history: LiveRows[SettingsVersionView] = LiveRows(
            keys_of(HISTORY_COLUMNS), self._history_cells
        )
        self._read: SettingsRead | None = None
        # The version whose difference the pane shows (or is being read).
        self._diff_of: int | None = None
        # After a change: select the version it made, so the pane shows what it changed.
        self._select_newest = False

    def compose(self) -> ComposeResult:
        yield ShellHeader("settings")
        yield Static(f"Reading the settings through {self._client.address}…", id="status")
        yield Static(id="action-line")
        yield Static(id="settings-in-force")
        table: DataTable = DataTable(id="settings-history", cursor_type="row", zebra_stripes=True)
        for heading, key in zip(HISTORY_COLUMNS, keys_of(HISTORY_COLUMNS), strict=True):
            table.add_column(heading, key=key)
        yield table
        yield Static(id="settings-diff")
        with VerticalScroll(id="settings-doc-box"):
            yield Static(id="settings-doc")
        yield KeyFooter()

    def _history_cells(self, v: SettingsVersionView) -> tuple[str, ...]:
        in_force = self._read.history.in_force_version if self._read else 0
        return history_cells(v, in_force)

    def on_mount(self) -> None:
        self.query_one("#action-line").display = False
        self.query_one("#settings-diff").display = False
        self.query_one("#settings-history", DataTable).focus()
        self.reread_every(REFRESH_S)

    # -- what is selected ----------------------------------------------------------------

    def selected_version(self) -> SettingsVersionView | None:
        table = next(self.query("#settings-history").results(DataTable), None)
        key = None if table is None else selected_key(table)
        return None if key is None else self._history.views.get(key)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "rollback":
            v = self.selected_version()
            newest = self._read.settings.latest_version if self._read else 0
            return True if v is not None and v.version != newest else None
        if action == "change":
            return True if self._read is not None else None
        return True

    # -- actions: a dialog, then a worker ------------------------------------------------

    def action_change(self) -> None:
        def send(change: SettingChange | None) -> None:
            if change is not None:
                self.run_call(
                    "change",
                    lambda c: c.set_settings(
                        [change.assignment], comment=change.comment, author=author()
                    ),
                )

        self.app.push_screen(SettingDialog(), send)

    def action_rollback(self) -> None:
        v = self.selected_version()
        if v is None:
            return

        def back(yes: bool | None) -> None:
            if yes:
                self.run_call("rollback", lambda c: c.rollback_settings(v.version, author=author()))

        question = (
            f"Keep version {v.version} ({version_line(v)}) again, as a new version? Every"
            " control plane and node takes its values within seconds; the history keeps"
            " the versions in between."
        )
        self.app.push_screen(
            Confirm(f"Roll back to version {v.version}", question, "Roll back"), back
        )

    # -- workers: the only code here that talks to gatewayd ------------------------------

    @work(exclusive=True, exit_on_error=False, group="settings-load")
    async def load(self) -> None:
        try:
            read = SettingsRead(
                await self._client.get_settings(), await self._client.settings_history()
            )
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(Answered("load", read))

    @work(exclusive=True, exit_on_error=False, group="settings-diff")
    async def load_diff(self, version: int) -> None:
        try:
            reply = await self._client.settings_diff(max(version - 1, 0), version)
        except LlmgwError as e:
            self.post_message(SettingsRefused("diff", e))
            return
        self.post_message(Answered("diff", reply))

    @work(exit_on_error=False, group="settings-action")
    async def run_call(self, action: str, call: Callable[[AdminClient], Awaitable[Any]]) -> None:
        try:
            reply = await call(self._client)
        except LlmgwError as e:
            self.post_message(SettingsRefused(action, e))
            return
        self.post_message(Answered(action, reply))

    # -- message handlers: widgets only --------------------------------------------------

    def on_answered(self, message: Answered) -> None:
        if message.action == "load":
            self._loaded(message.reply)  # type: ignore[arg-type]
            return
        if message.action == "diff":
            pane = self.query_one("#settings-diff", Static)
            pane.update(diff_body(message.reply))  # type: ignore[arg-type]
            pane.display = True
            return
        self._say(written_text(message.action, message.reply), error=False)  # type: ignore[arg-type]
        self._select_newest = True
        self.load()

    def on_settings_refused(self, message: SettingsRefused) -> None:
        self._say(describe(message.error), error=True)
        if message.action != "diff":
            self.load()

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._follow_selection()
        self.refresh_bindings()

    # -- the widgets ---------------------------------------------------------------------

    def _loaded(self, read: SettingsRead) -> None:
        self._read = read
        table = self.query_one("#settings-history", DataTable)
        views = [(str(v.version), v) for v in read.history.versions]
        # Every row again: the in-force mark moves between rows.
        self._history.load(table, views)
        if self._select_newest and views:
            self._select_newest = False
            table.move_cursor(row=0)
        reply = read.settings
        status = self.query_one("#status", Static)
        show_text(
            status,
            f"Settings: {version_line(reply.version)} · {len(views)} version(s)"
            f" · every {REFRESH_S:g} s · r reads again",
        )
        status.set_class(False, "-error")
        show_text(
            self.query_one("#settings-in-force", Static),
            "\n".join(in_force_lines(reply.in_force, reply.latest_version)),
        )
        self.query_one("#settings-doc", Static).update(
            Syntax(value_text(reply.value_yaml), "yaml", background_color="default")
        )
        self._follow_selection()
        self.refresh_bindings()

    def _follow_selection(self) -> None:
        v = self.selected_version()
        if v is None or v.version == self._diff_of:
            return
        self._diff_of = v.version
        self.load_diff(v.version)

    def _say(self, text: str, *, error: bool) -> None:
        """What the last change did, or why it was refused, until the next."""
        line = self.query_one("#action-line", Static)
        line.update(text)
        line.set_class(error, "-error")
        line.display = True
