"""The Nodes screen: every node and its state, live — what ``llmgw ctl nodes`` prints.

It reads the list with the same ``AdminClient.list_nodes()`` the command calls
and draws each row with the same cell helpers (``llmgw.nodefmt``), then follows
the admin ``Watch`` stream so a row changes the moment its node does. Enter on
a row opens the node's details, read with ``get_node`` like ``llmgw ctl node show``.

Only workers talk to gatewayd; they post past-tense messages (``NodesLoaded``,
``NodeChanged``, ``AdminFailed``) whose handlers touch the widgets.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Header, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.nodefmt import NO_NODES, NODE_COLUMNS, node_cells, node_details
from proto.llmgw.v1 import ListNodesReply, NodeView, WatchEvent
from tui.screens.common import AdminFailed, describe, follow_watch, show_worker_error

log = logging.getLogger(__name__)

# DataTable column keys: the command's headings, lower case ("node", "state", …).
COLUMN_KEYS = tuple(c.lower() for c in NODE_COLUMNS)


class NodesLoaded(Message):
    """The whole node list arrived (``list_nodes``)."""

    def __init__(self, reply: ListNodesReply) -> None:
        super().__init__()
        self.reply = reply


class NodeChanged(Message):
    """One node changed (a ``Watch`` event); ``view`` is None once gatewayd forgot it."""

    def __init__(self, node_id: str, view: NodeView | None) -> None:
        super().__init__()
        self.node_id = node_id
        self.view = view


class NodeFetched(Message):
    """One node's details arrived (``get_node``)."""

    def __init__(self, view: NodeView) -> None:
        super().__init__()
        self.view = view


class NodeDetails(ModalScreen[None]):
    """One node's state, host facts and GPUs over the Nodes screen; Escape closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss", "Close")]

    def __init__(self, client: AdminClient, view: NodeView) -> None:
        super().__init__()
        self._client = client
        self.node_id = view.node_id
        self._view = view

    def compose(self) -> ComposeResult:
        with Vertical(id="details-box"):
            yield Static(id="details-body")
            yield Static("Esc closes · r reads it again", id="details-status")

    def on_mount(self) -> None:
        self.query_one("#details-box").border_title = f"Node {self.node_id}"
        # Draw what the list already knows at once, then read it as the command does.
        self.show(self._view)
        self.reload()

    def show(self, view: NodeView) -> None:
        """Draw ``view``; the Nodes screen calls this too as watch events arrive."""
        self._view = view
        self.query_one("#details-body", Static).update(node_details(view))

    def reload(self) -> None:
        self.fetch_node()

    @work(exclusive=True, exit_on_error=False, group="node-details")
    async def fetch_node(self) -> None:
        try:
            view = await self._client.get_node(self.node_id)
        except LlmgwError as e:  # a node removed meanwhile is NotFoundError, not AdminError
            self.post_message(AdminFailed(e))
            return
        self.post_message(NodeFetched(view))

    def on_node_fetched(self, message: NodeFetched) -> None:
        self.show(message.view)

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#details-status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#details-status", Static), event)


class NodesScreen(Screen[None]):
    """Every node in a table keyed by node id, kept current by the admin ``Watch`` stream."""

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._views: dict[str, NodeView] = {}
        # "No nodes yet" only once gatewayd said so, never while it cannot be reached.
        self._loaded = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Reading nodes from {self._client.address}…", id="status")
        table: DataTable = DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        for heading, key in zip(NODE_COLUMNS, COLUMN_KEYS, strict=True):
            table.add_column(heading, key=key)
        yield table
        yield Static(NO_NODES, id="empty")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#empty").display = False
        self.load_nodes()
        self.follow_nodes()

    def reload(self) -> None:
        """Read the list again and reopen the watch (the r key)."""
        self.load_nodes()
        self.follow_nodes()

    # -- workers: the only code here that talks to gatewayd --------------------

    @work(exclusive=True, exit_on_error=False, group="nodes-load")
    async def load_nodes(self) -> None:
        try:
            reply = await self._client.list_nodes()
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(NodesLoaded(reply))

    @work(exclusive=True, exit_on_error=False, group="nodes-watch")
    async def follow_nodes(self) -> None:
        # Not "watch_nodes": Textual calls watch_<name> methods when a reactive changes.
        async def resync() -> Message:
            return NodesLoaded(await self._client.list_nodes())

        async def on_event(event: WatchEvent) -> Message | None:
            return NodeChanged(event.key, event.node) if event.topic == "nodes" else None

        await follow_watch(self, self._client, ["nodes"], resync=resync, on_event=on_event)

    # -- message handlers: widgets only ----------------------------------------

    def on_nodes_loaded(self, message: NodesLoaded) -> None:
        table = self.query_one("#nodes", DataTable)
        selected = self._selected_node_id()
        self._views = {n.node_id: n for n in message.reply.nodes}
        table.clear()
        for n in message.reply.nodes:
            table.add_row(*node_cells(n), key=n.node_id)
        if selected in self._views:
            table.move_cursor(row=table.get_row_index(selected))
        self._loaded = True
        self._show_counts()

    def on_node_changed(self, message: NodeChanged) -> None:
        table = self.query_one("#nodes", DataTable)
        node_id, view = message.node_id, message.view
        if view is None:
            if node_id in self._views:
                del self._views[node_id]
                table.remove_row(node_id)
        elif node_id in self._views:
            self._views[node_id] = view
            for key, cell in zip(COLUMN_KEYS, node_cells(view), strict=True):
                table.update_cell(node_id, key, cell, update_width=True)
        else:
            self._views[node_id] = view
            table.add_row(*node_cells(view), key=node_id)
        details = self.app.screen
        if view is not None and isinstance(details, NodeDetails) and details.node_id == node_id:
            details.show(view)
        if self._loaded:
            self._show_counts()

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        view = self._views.get(str(event.row_key.value))
        if view is not None:
            self.app.push_screen(NodeDetails(self._client, view))

    def _selected_node_id(self) -> str | None:
        table = self.query_one("#nodes", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def _show_counts(self) -> None:
        nodes = self._views.values()
        ready = sum(1 for n in nodes if n.state == "ready")
        status = self.query_one("#status", Static)
        status.update(f"Nodes: {len(nodes)} ({ready} ready) · live from {self._client.address}")
        status.set_class(False, "-error")
        self.query_one("#empty").display = not self._views
        self.query_one("#nodes").display = bool(self._views)
