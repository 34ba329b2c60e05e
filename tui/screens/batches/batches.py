"""The Batches screen: every batch of the Batch API, its progress, and the one selected.

Its table is ``list_batches()``, what ``llmgw ctl batches list`` prints,
each row drawn with the command's ``batch_cells`` (progress as answered/total
with a bar); the pane under it is the selected batch as ``llmgw ctl batches
show`` draws it (``batch_details``): its files, times and why it failed.
``x`` cancels the selected batch after asking (``cancel_batch``, as ``llmgw
ctl batches cancel``): it is offered only for a batch that has not finished.

No watch announces a batch's progress, so the screen reads the list again
every ``REFRESH_S`` while it is shown, whenever it is shown again, after a
cancel, and on r. Only workers talk to gatewayd; a refused cancel is said on
the action line in the command's words.
"""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.batchfmt import (
    BATCH_COLUMNS,
    FINISHED,
    NO_BATCHES,
    batch_cells,
    batch_details,
    cancel_batch,
    cancel_text,
    counts,
)
from proto.llmgw.v1 import BatchView, ListBatchesReply
from tui.screens.common import AdminFailed, Refused, describe, show_worker_error
from tui.screens.dialogs import Confirm
from tui.screens.live import LiveRows, Rereads, selected_key, show_text
from tui.screens.shell import KeyFooter, ShellHeader

# 2 s: a batch of sim requests moves by hundreds a second; the bar should
# move while one watches, without a screen left open asking more than this.
REFRESH_S = 2.0
# DataTable column keys: the command's headings, lower case ("batch", "progress", …).
COLUMN_KEYS = tuple(c.lower() for c in BATCH_COLUMNS)


class BatchesLoaded(Message):
    """``list_batches`` answered."""

    def __init__(self, reply: ListBatchesReply) -> None:
        super().__init__()
        self.reply = reply


class BatchCancelled(Message):
    """``cancel_batch`` answered with the batch as it is now (cancelling or cancelled)."""

    def __init__(self, view: BatchView) -> None:
        super().__init__()
        self.view = view


class CancelRefused(Refused):
    """gatewayd refused the cancel (the batch is gone or has finished), or was not reached."""


class BatchesScreen(Rereads, Screen[None]):
    """Batches newest first with their progress; the selected one in full under them."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "cancel_batch", "Cancel batch"),
    ]

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._rows: LiveRows[BatchView] = LiveRows(COLUMN_KEYS, batch_cells)
        # "No batches" only once gatewayd said so, never while it cannot be reached.
        self._loaded = False

    def compose(self) -> ComposeResult:
        yield ShellHeader("batches")
        yield Static(f"Reading batches from {self._client.address}…", id="status")
        yield Static(id="action-line")
        table: DataTable = DataTable(id="batches", cursor_type="row", zebra_stripes=True)
        for heading, key in zip(BATCH_COLUMNS, COLUMN_KEYS, strict=True):
            table.add_column(heading, key=key)
        yield table
        yield Static(NO_BATCHES, id="batches-empty")
        yield Static(id="batch-pane")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#batches-empty").display = False
        self.query_one("#action-line").display = False
        self.query_one("#batches", DataTable).focus()
        self.reread_every(REFRESH_S)

    # -- what is selected ----------------------------------------------------------

    def selected_batch(self) -> BatchView | None:
        table = next(self.query("#batches").results(DataTable), None)  # none before compose
        key = None if table is None else selected_key(table)
        return None if key is None else self._rows.views.get(key)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_batch":
            b = self.selected_batch()
            # Shown but dimmed for a finished batch: the key is there, it has nothing to do.
            if b is None:
                return None
            return b.status not in FINISHED and b.status != "cancelling"
        return True

    # -- the action: a question, then a worker ---------------------------------------

    def action_cancel_batch(self) -> None:
        b = self.selected_batch()
        if b is None or b.status in FINISHED:
            return
        done, _, total = counts(b)

        def cancel(yes: bool | None) -> None:
            if yes:
                self.run_cancel(b.id)

        question = (
            f"Cancel {b.id} of {b.project} ({b.endpoint}, {done:,} of {total:,} answered)? "
            "No new request of it starts; those in flight finish, and what was answered "
            "stays in its output file. It cannot be started again."
        )
        self.app.push_screen(Confirm(f"Cancel {b.id}", question, "Cancel batch"), cancel)

    # -- workers: the only code here that talks to gatewayd --------------------

    @work(exclusive=True, exit_on_error=False, group="batches-load")
    async def load(self) -> None:
        try:
            reply = await self._client.list_batches()
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(BatchesLoaded(reply))

    @work(exclusive=True, exit_on_error=False, group="batches-action")
    async def run_cancel(self, batch_id: str) -> None:
        try:
            view = await cancel_batch(self._client, batch_id)
        except LlmgwError as e:
            self.post_message(CancelRefused(e))
            return
        self.post_message(BatchCancelled(view))

    # -- message handlers: widgets only ----------------------------------------

    def on_batches_loaded(self, message: BatchesLoaded) -> None:
        self._loaded = True
        table = self.query_one("#batches", DataTable)
        views = [(b.id, b) for b in message.reply.batches]
        if [k for k, _ in views] != list(self._rows.views):
            # A batch came or went: the rows again, newest first, the cursor kept.
            self._rows.load(table, views)
        else:
            for key, view in views:
                self._rows.put(key, view)
            self._rows.flush(table)
        self._show()

    def on_batch_cancelled(self, message: BatchCancelled) -> None:
        self._say(cancel_text(message.view), error=False)
        self._rows.put(message.view.id, message.view)
        self._rows.flush(self.query_one("#batches", DataTable))
        self._show()
        self.load()

    def on_cancel_refused(self, message: CancelRefused) -> None:
        self._say(describe(message.error), error=True)
        self.load()

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_pane()
        self.refresh_bindings()

    # -- the widgets -----------------------------------------------------------------

    def _say(self, text: str, *, error: bool) -> None:
        """What the last cancel did, or why it was refused, until the next one."""
        line = self.query_one("#action-line", Static)
        line.update(text)
        line.set_class(error, "-error")
        line.display = True

    def _show(self) -> None:
        views = self._rows.views.values()
        running = sum(1 for b in views if b.status not in FINISHED)
        status = self.query_one("#status", Static)
        show_text(
            status,
            f"Batches: {len(views)} ({running} not finished) · from {self._client.address}"
            f" · every {REFRESH_S:g} s",
        )
        status.set_class(False, "-error")
        self.query_one("#batches-empty").display = self._loaded and not views
        self.query_one("#batches").display = bool(views)
        self._show_pane()
        self.refresh_bindings()

    def _show_pane(self) -> None:
        pane = self.query_one("#batch-pane", Static)
        b = self.selected_batch()
        pane.display = b is not None
        if b is not None:
            pane.update(batch_details(b))
