"""The Replicas screen: every replica, its state and why, live, as ``llmgw ctl replicas`` prints.

Its rows are the same ``list_replicas()`` reply the command prints (read by
the app with the rest of the cluster), drawn with the same cell helpers
(``llmgw.present.modelfmt``); the app's one admin ``Watch`` brings "replicas", so a
row moves through pending,
placed, fetching … ready the moment its replica does. Enter (or l) on a row
opens the replica's history: every state it passed, when, and why, its deadline,
a download's progress, and the last lines its engine wrote (``llmgw ctl logs``).
``R`` restarts the selected replica after asking (``restart_replica``, as
``llmgw ctl replica restart``): a running one stops and a new one takes its
place; a failed or unplaced one is tried again at once.

Only workers talk to gatewayd; what the watch brings is recorded as it comes
(``feed_event``) and past-tense messages (``ReplicasLoaded``,
``ReplicasChanged``, ``AdminFailed``) have it drawn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.modelfmt import (
    HISTORY_COLUMNS,
    NO_REPLICAS,
    REPLICA_COLUMNS,
    gib,
    history_cells,
    replica_cells,
    replica_facts,
)
from llmgw.present.opsfmt import restart_text
from proto.llmgw.v1 import ListReplicasReply, ReplicaView, RestartReplicaReply, WatchEvent
from tui.screens.bars import bar
from tui.screens.cluster.cluster_feed import ClusterRead
from tui.screens.common import AdminFailed, Refused, describe, show_worker_error
from tui.screens.dialogs import Confirm
from tui.screens.live import DrawLater, Flag, LiveRows, selected_key, show_text
from tui.screens.shell import KeyFooter, ShellHeader

log = logging.getLogger(__name__)


# DataTable column keys: the command's headings, lower case ("replica", "state", …).
COLUMN_KEYS = tuple(c.lower() for c in REPLICA_COLUMNS)


class ReplicasLoaded(Message):
    """The whole replica list arrived (``list_replicas``)."""

    def __init__(self, reply: ListReplicasReply) -> None:
        super().__init__()
        self.reply = reply


class ReplicasChanged(Message):
    """Watch events were recorded: draw them."""


class ReplicaChanged(Message):
    """One replica changed (a ``Watch`` event); ``view`` is None once gatewayd forgot it."""

    def __init__(self, replica_id: str, view: ReplicaView | None) -> None:
        super().__init__()
        self.replica_id = replica_id
        self.view = view


def replica_body(r: ReplicaView) -> Table:
    """A replica's facts as a two-column grid (label, value), with a download's bar."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for label, value in replica_facts(r):
        facts.add_row(label, value)
    if r.fetch and r.fetch.bytes_total:
        line = bar(r.fetch.bytes_done, r.fetch.bytes_total, 20, style="cyan")
        share = 100 * r.fetch.bytes_done // r.fetch.bytes_total
        line.append(f" {share}% of {gib(r.fetch.bytes_total)}")
        facts.add_row("download", line)
    return facts


class ReplicaRestarted(Message):
    """gatewayd took the restart (``restart_replica``)."""

    def __init__(self, reply: RestartReplicaReply) -> None:
        super().__init__()
        self.reply = reply


class RestartFailed(Refused):
    """The restart was refused or failed: the error says what to do."""


def restart_question(view: ReplicaView) -> str:
    if view.state in ("failed", "pending"):
        return f"Try {view.replica_id} ({view.model}) again now, without waiting for its retry?"
    return (
        f"Restart {view.replica_id} ({view.model})? It stops and a new replica takes its "
        f"place; while it starts, {view.model} has one replica fewer."
    )


def ask_restart(screen: Screen, view: ReplicaView, restart: Callable[[str], object]) -> None:
    """Ask before restarting; on yes, ``restart(replica_id)`` (a worker of ``screen``)."""

    def confirmed(yes: bool | None) -> None:
        if yes:
            restart(view.replica_id)

    title = f"Restart {view.replica_id}"
    screen.app.push_screen(Confirm(title, restart_question(view), "Restart"), confirmed)


async def restart(client: AdminClient, replica_id: str) -> Message:
    """Restart a replica as ``llmgw ctl replica restart`` does; the answer as a message."""
    try:
        return ReplicaRestarted(await client.restart_replica(replica_id))
    except LlmgwError as e:
        return RestartFailed(e)


class LogsFetched(Message):
    """The last lines of a replica's engine output arrived (``replica_logs``)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines


class ReplicaDetails(ModalScreen[None]):
    """One replica's state, deadline, history and log tail; Escape closes it.

    The Replicas screen hands it every change of its replica as the watch
    reports it; the log tail is fetched from the node (as ``ctl logs`` does),
    again with ``l``.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("l", "logs", "Log tail"),
        Binding("R", "restart", "Restart"),
    ]
    LOG_LINES = 20

    def __init__(self, view: ReplicaView, client: AdminClient | None = None) -> None:
        super().__init__()
        self.replica_id = view.replica_id
        self._view = view
        self._client = client

    def compose(self) -> ComposeResult:
        with Vertical(id="replica-box", classes="dialog"):
            yield Static(id="replica-facts")
            history: DataTable = DataTable(id="replica-history", cursor_type="row")
            for heading in HISTORY_COLUMNS:
                history.add_column(heading, key=heading.lower())
            yield history
            yield Static("", id="replica-logs")
            yield Static(
                "Esc closes · l reads the log tail again · R restarts it · it follows"
                " the replica live",
                classes="dialog-status",
            )
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#replica-box").border_title = f"Replica {self.replica_id}"
        self.show(self._view)
        self.action_logs()

    def action_logs(self) -> None:
        if self._client is not None and self._view.node_id:
            self.fetch_logs()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Without a client (a history drawn on its own) there is nothing to restart with.
        return not (action == "restart" and self._client is None)

    def action_restart(self) -> None:
        ask_restart(self, self._view, self.run_restart)

    @work(exclusive=True, exit_on_error=False, group="replica-restart")
    async def run_restart(self, replica_id: str) -> None:
        self.post_message(await restart(self._client, replica_id))

    def on_replica_restarted(self, message: ReplicaRestarted) -> None:
        self._say(restart_text(message.reply), error=False)

    def on_restart_failed(self, message: RestartFailed) -> None:
        self._say(describe(message.error), error=True)

    def _say(self, text: str, *, error: bool) -> None:
        status = self.query_one(".dialog-status", Static)
        status.update(text)
        status.set_class(error, "-error")

    @work(exclusive=True, exit_on_error=False, group="replica-logs")
    async def fetch_logs(self) -> None:
        try:
            reply = await self._client.replica_logs(self.replica_id, self.LOG_LINES)
        except LlmgwError as e:
            self.post_message(LogsFetched([f"(no log tail: {e.message})"]))
            return
        self.post_message(LogsFetched(list(reply.lines)))

    def on_logs_fetched(self, message: LogsFetched) -> None:
        text = "\n".join(message.lines) or "(the engine has written nothing yet)"
        self.query_one("#replica-logs", Static).update(Text(text, style="dim"))

    def show(self, view: ReplicaView | None) -> None:
        """Draw ``view``; None: gatewayd forgot the replica (its last state stays shown)."""
        if not self.query("#replica-facts"):
            # A watch event between the push of this screen and its compose: on_mount draws it.
            if view is not None:
                self._view = view
            return
        if view is None:
            status = self.query_one(".dialog-status", Static)
            status.update(f"{self.replica_id} is gone: gatewayd no longer knows it · Esc closes")
            return
        self._view = view
        self.query_one("#replica-facts", Static).update(replica_body(view))
        history = self.query_one("#replica-history", DataTable)
        history.clear()
        for event in view.history:
            history.add_row(*history_cells(event))
        if view.history:
            history.move_cursor(row=len(view.history) - 1)


class ReplicasScreen(DrawLater, Screen[None]):
    """Every replica in a table keyed by replica id, kept current by the admin ``Watch``.

    Events only record the new views; rows and counts are drawn together
    (``DrawLater``); an open history is fed at once.
    """

    # Enter on the table selects its row (which opens the history); this binding
    # puts it in the footer and opens it when the table does not have the focus.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "history", "History", priority=True),
        Binding("l", "history", "Log tail", show=False),
        Binding("R", "restart", "Restart"),
    ]
    ON_A_REPLICA: ClassVar[frozenset[str]] = frozenset({"history", "restart"})

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._rows: LiveRows[ReplicaView] = LiveRows(COLUMN_KEYS, replica_cells)
        self._changed = Flag()
        self._changed_ids: set[str] = set()
        self._details: ReplicaDetails | None = None  # the open history, fed by the watch
        # "No replicas" only once gatewayd said so, never while it cannot be reached.
        self._loaded = False

    def compose(self) -> ComposeResult:
        yield ShellHeader("replicas")
        yield Static(f"Reading replicas from {self._client.address}…", id="status")
        yield Static(id="action-line")
        table: DataTable = DataTable(id="replicas", cursor_type="row", zebra_stripes=True)
        for heading, key in zip(REPLICA_COLUMNS, COLUMN_KEYS, strict=True):
            table.add_column(heading, key=key)
        yield table
        yield Static(f"{NO_REPLICAS} Serve a model on the Models screen (m).", id="empty")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#empty").display = False
        self.query_one("#action-line").display = False
        # The app reads the cluster and follows its watch once for every screen.
        if self.app.listen(self):  # type: ignore[attr-defined]
            self._rows.replace(self.app.summary.replicas.items())  # type: ignore[attr-defined]
            self._loaded = True
            self.draw()  # mounted: its widgets are there

    def reload(self) -> None:
        """Read the cluster again and reopen the watch (the r key)."""
        self.app.reload_cluster()  # type: ignore[attr-defined]

    # -- the app's watch: recorded here, in the order things happen; drawn by messages --

    def feed_read(self, read: ClusterRead) -> None:
        self._rows.replace((r.replica_id, r) for r in read.replicas.replicas)
        self.post_message(ReplicasLoaded(read.replicas))

    def feed_event(self, event: WatchEvent) -> None:
        if event.topic != "replicas":
            return
        self._record(event.key, event.replica)
        self._changed_ids.add(event.key)
        if self._changed.up():
            self.post_message(ReplicasChanged())

    def feed_failed(self, error: LlmgwError, retry_in_s: float | None) -> None:
        self.post_message(AdminFailed(error, retry_in_s=retry_in_s))

    # -- workers: the only code here that talks to gatewayd --------------------

    # -- message handlers: widgets only ----------------------------------------

    @property
    def _views(self) -> dict[str, ReplicaView]:
        return self._rows.views

    def _record(self, replica_id: str, view: ReplicaView | None) -> None:
        if view is None:
            self._rows.drop(replica_id)
        else:
            self._rows.put(replica_id, view)

    def on_replicas_changed(self, message: ReplicasChanged) -> None:
        self._changed.down()
        changed, self._changed_ids = self._changed_ids, set()
        if self._details is not None and self._details.replica_id in changed:
            replica_id = self._details.replica_id
            self._show_details(replica_id, self._views.get(replica_id))
        self.draw_later()

    def on_replicas_loaded(self, message: ReplicasLoaded) -> None:
        self._loaded = True
        self.draw_now()
        if self._details is not None:
            replica_id = self._details.replica_id
            self._show_details(replica_id, self._views.get(replica_id))

    def on_replica_changed(self, message: ReplicaChanged) -> None:
        replica_id, view = message.replica_id, message.view
        self._record(replica_id, view)
        self._show_details(replica_id, view)
        self.draw_later()

    def draw(self) -> None:
        self._rows.flush(self.query_one("#replicas", DataTable))
        if self._loaded:
            self._show_counts()

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.ON_A_REPLICA and self._selected_replica_id() is None:
            return None
        return True

    def action_restart(self) -> None:
        view = self._views.get(self._selected_replica_id() or "")
        if view is not None:
            ask_restart(self, view, self.run_restart)

    @work(exclusive=True, exit_on_error=False, group="replicas-action")
    async def run_restart(self, replica_id: str) -> None:
        self.post_message(await restart(self._client, replica_id))

    def on_replica_restarted(self, message: ReplicaRestarted) -> None:
        self._say(restart_text(message.reply), error=False)
        view = message.reply.replica
        if view is not None:
            self.on_replica_changed(ReplicaChanged(view.replica_id, view))
            self.draw_now()

    def on_restart_failed(self, message: RestartFailed) -> None:
        self._say(describe(message.error), error=True)

    def _say(self, text: str, *, error: bool) -> None:
        """What the last action did, or why it was refused, until the next action."""
        line = self.query_one("#action-line", Static)
        line.update(text)
        line.set_class(error, "-error")
        line.display = True

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_bindings()

    def action_history(self) -> None:
        replica_id = self._selected_replica_id()
        if replica_id is not None:
            self._open_details(replica_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self._open_details(str(event.row_key.value))

    def _open_details(self, replica_id: str) -> None:
        view = self._views.get(replica_id)
        if view is not None:
            self._details = ReplicaDetails(view, self._client)
            self.app.push_screen(self._details, lambda _: self._forget_details())

    def _forget_details(self) -> None:
        self._details = None

    def _show_details(self, replica_id: str, view: ReplicaView | None) -> None:
        details = self._details
        if details is not None and details.is_mounted and details.replica_id == replica_id:
            details.show(view)

    def _selected_replica_id(self) -> str | None:
        table = next(self.query("#replicas").results(DataTable), None)  # none before compose
        return None if table is None else selected_key(table)

    def _show_counts(self) -> None:
        replicas = self._views.values()
        ready = sum(1 for r in replicas if r.state == "ready")
        status = self.query_one("#status", Static)
        show_text(
            status, f"Replicas: {len(replicas)} ({ready} ready) · live from {self._client.address}"
        )
        status.set_class(False, "-error")
        self.query_one("#empty").display = not self._views
        self.query_one("#replicas").display = bool(self._views)
        self.bindings_for(self._selected_replica_id())
