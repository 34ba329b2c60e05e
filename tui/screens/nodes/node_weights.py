"""The Weights dialog: what one node keeps on its disk — what ``llmgw ctl weights NODE`` prints.

Opened with ``f`` on the Nodes screen for the selected node. Its line on top
is the command's (what the cache holds of its limit, how the limit was set,
the disk's free space, and why it stays over where it does); its rows the
command's, drawn with the same cell helpers (``llmgw.present.weightsfmt``),
newest use first: the bottom rows are the ones the node gives up first. ``x``
removes the selected entry after asking, as ``llmgw ctl weights rm NODE KEY``
does; weights a replica uses are kept, and the status line says by which.

It reads the node's report again every few seconds while shown, and with r.
Only workers talk to gatewayd; they post ``Answered`` or ``WeightsRefused``.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.weightsfmt import (
    NO_ENTRIES,
    WEIGHTS_COLUMNS,
    bytes_text,
    node_line,
    node_notes,
    removed_text,
    sorted_entries,
    weights_cells,
)
from proto.llmgw.v1 import CachedWeights, ListWeightsReply, RemoveWeightsReply
from proto.llmgw.v1 import NodeWeights as NodeWeightsView
from tui.screens.common import Answered, Refused, describe, show_worker_error
from tui.screens.dialogs import Confirm
from tui.screens.live import Rereads, selected_key
from tui.screens.shell import KeyFooter

# The node's report changes when a shard starts or stops, or its cache is trimmed.
REREAD_S = 5.0
HELP = "Esc closes · x removes the selected entry · r reads it again"


class WeightsRefused(Refused):
    """gatewayd could not list or remove the node's weights; the error says why."""


class NodeWeights(Rereads, ModalScreen[None]):
    """One node's weights cache over the Nodes screen; Escape closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("x,delete", "remove", "Remove"),
    ]

    def __init__(self, client: AdminClient, node_id: str) -> None:
        super().__init__()
        self._client = client
        self.node_id = node_id
        self._entries: dict[str, CachedWeights] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="weights-box", classes="dialog"):
            yield Static(f"Reading the weights of {self.node_id}…", id="weights-head")
            table: DataTable = DataTable(id="weights", cursor_type="row")
            for heading in WEIGHTS_COLUMNS:
                table.add_column(heading, key=heading.lower())
            yield table
            yield Static(HELP, id="weights-status", classes="dialog-status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#weights-box").border_title = f"Weights on {self.node_id}"
        self.query_one("#weights").display = False
        self.load()
        self.reread_every(REREAD_S)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "remove":
            return True if self.selected_key() is not None else None
        return True

    def selected_key(self) -> str | None:
        table = next(self.query("#weights").results(DataTable), None)
        return None if table is None else selected_key(table)

    # -- workers: the only code here that talks to gatewayd -------------------------

    def load(self) -> None:
        self.fetch_weights()

    @work(exclusive=True, exit_on_error=False, group="node-weights")
    async def fetch_weights(self) -> None:
        try:
            reply = await self._client.list_weights(self.node_id)
        except LlmgwError as e:
            self.post_message(WeightsRefused(e))
            return
        self.post_message(Answered("load", reply))

    @work(exclusive=True, exit_on_error=False, group="node-weights-remove")
    async def run_remove(self, key: str) -> None:
        try:
            reply = await self._client.remove_weights(self.node_id, [key])
        except LlmgwError as e:
            self.post_message(WeightsRefused(e))
            return
        self.post_message(Answered("remove", reply))

    # -- actions ----------------------------------------------------------------------

    def action_remove(self) -> None:
        key = self.selected_key()
        entry = self._entries.get(key) if key is not None else None
        if entry is None:
            return
        question = (
            f"Remove {key} ({bytes_text(entry.size_bytes)}) from {self.node_id}'s disk? "
            "A replica started on it later fetches it again."
        )
        if entry.used_by:
            question += f" It is in use by {', '.join(entry.used_by)}: it will be kept."

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_remove(key)

        self.app.push_screen(Confirm(f"Remove {key}", question, "Remove"), confirmed)

    # -- message handlers: widgets only -------------------------------------------------

    def on_answered(self, message: Answered) -> None:
        if message.action == "load" and isinstance(message.reply, ListWeightsReply):
            nodes = [n for n in message.reply.nodes if n.node_id == self.node_id]
            if nodes:
                self.show(nodes[0])
        elif message.action == "remove" and isinstance(message.reply, RemoveWeightsReply):
            self._say(removed_text(message.reply), error=bool(message.reply.kept))
            self.load()

    def show(self, n: NodeWeightsView) -> None:
        entries = sorted_entries(list(n.report.entries)) if n.report and n.reported_at else []
        nothing = [Text(NO_ENTRIES, style="dim")] if n.reported_at and not entries else []
        self.query_one("#weights-head", Static).update(
            Group(node_line(n), *node_notes(n), *nothing)
        )
        self._entries = {e.key: e for e in entries}
        table = self.query_one("#weights", DataTable)
        selected = selected_key(table)
        table.clear()
        for e in entries:
            table.add_row(*weights_cells(e), key=e.key)
        if selected in self._entries:
            table.move_cursor(row=table.get_row_index(selected))
        table.display = bool(entries)
        self.refresh_bindings()

    def on_weights_refused(self, message: WeightsRefused) -> None:
        self._say(describe(message.error), error=True)

    def _say(self, text, *, error: bool) -> None:
        status = self.query_one("#weights-status", Static)
        status.update(text)
        status.set_class(error, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#weights-status", Static), event)
