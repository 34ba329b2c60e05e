"""The Nodes screen: every node and its state, live — what ``llmgw ctl nodes`` prints.

Its rows are the nodes of the same ``list_nodes()`` reply the command prints
(read by the app with the rest of the cluster, ``tui.screens.cluster.cluster_feed``),
drawn with the same cell helpers (``llmgw.present.nodefmt``), and the app's one admin
``Watch`` keeps them current: a row changes the moment its node does. Under
the table, a pane shows the selected node's GPUs with memory bars and the
replicas on each (``llmgw ctl replicas``), its engines and their install
state (``llmgw ctl engines``), its host's warnings, and how a drain is going.
Enter on a row opens the node's details, read with ``get_node`` like
``llmgw ctl node show``.

On the selected row (``node_actions.NodeActions``): ``c`` cordons or
uncordons it, ``d`` drains it, ``x`` removes it, ``l`` sets or removes its
labels — as ``llmgw ctl cordon``, ``uncordon``, ``drain``, ``node rm`` and
``node label`` — and ``f`` opens the weights it keeps on its disk, as
``llmgw ctl weights NODE`` lists them. The LABELS column shows agent.yaml's with the operator's over
them, as ``ctl nodes`` does.

Only workers talk to gatewayd; what the app's watch brings is recorded in the
screen's views as it comes (``feed_event``) and past-tense messages
(``NodesLoaded``, ``NodesChanged``, ``AdminFailed``) have it drawn.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.nodefmt import NO_NODES, NODE_COLUMNS, node_cells, node_details
from llmgw.present.opsfmt import removed_node_text
from proto.llmgw.v1 import EngineView, ListNodesReply, NodeView, ReplicaView, WatchEvent
from tui.screens.cluster.cluster_feed import ClusterRead
from tui.screens.common import AdminFailed, describe, show_worker_error
from tui.screens.live import DrawLater, Flag, LiveRows, selected_key, show_text
from tui.screens.nodes.node_actions import NodeActed, NodeActionFailed, NodeActions, NodeRemoved
from tui.screens.nodes.node_pane import Drain, drain_of, node_pane, replicas_on
from tui.screens.shell import KeyFooter, ShellHeader

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


class NodesChanged(Message):
    """Watch events were recorded (nodes, replicas): draw them."""


class NodeFetched(Message):
    """One node's details arrived (``get_node``)."""

    def __init__(self, view: NodeView) -> None:
        super().__init__()
        self.view = view


class EnginesLoaded(Message):
    """The engines were read again (``list_engines``, as ``llmgw ctl engines``)."""

    def __init__(self, engines: list[EngineView]) -> None:
        super().__init__()
        self.engines = engines


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
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#details-box").border_title = f"Node {self.node_id}"
        # Draw what the list already knows at once, then read it as the command does.
        self.show(self._view)
        self.reload()

    def show(self, view: NodeView) -> None:
        """Draw ``view``; the Nodes screen calls this too as watch events arrive."""
        self._view = view
        # A watch event can come between the push of this screen and its compose:
        # the view is kept, and on_mount draws it.
        for body in self.query("#details-body").results(Static):
            body.update(node_details(view))

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


class NodesScreen(NodeActions, DrawLater, Screen[None]):
    """Every node in a table keyed by node id, kept current by the admin ``Watch`` stream.

    Events only record the new views; the table, counts and pane are drawn
    together (``DrawLater``), and not at all while another screen is shown.
    """

    BINDINGS: ClassVar[list[BindingType]] = NodeActions.NODE_BINDINGS

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._rows: LiveRows[NodeView] = LiveRows(COLUMN_KEYS, node_cells)
        self._changed = Flag()
        self._pane_key: object = None
        self._replicas: dict[str, ReplicaView] = {}
        self._engines: list[EngineView] | None = None
        # The most replicas each draining node has had to move, for its progress bar.
        self._drain_total: dict[str, int] = {}
        # "No nodes yet" only once gatewayd said so, never while it cannot be reached.
        self._loaded = False

    def compose(self) -> ComposeResult:
        yield ShellHeader("nodes")
        yield Static(f"Reading nodes from {self._client.address}…", id="status")
        yield Static(id="action-line")
        table: DataTable = DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        for heading, key in zip(NODE_COLUMNS, COLUMN_KEYS, strict=True):
            table.add_column(heading, key=key)
        yield table
        with VerticalScroll(id="node-pane"):
            yield Static(id="node-pane-body")
        yield Static(NO_NODES, id="empty")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#empty").display = False
        self.query_one("#node-pane").display = False
        self.query_one("#action-line").display = False
        # The app reads the cluster and follows its watch once for every screen.
        if self.app.listen(self):  # type: ignore[attr-defined]
            s = self.app.summary  # type: ignore[attr-defined]
            self._rows.replace(s.nodes.items())
            self._replicas = dict(s.replicas)
            self._engines = list(s.engines)
            self._loaded = True
            self.draw()  # mounted: its widgets are there

    def reload(self) -> None:
        """Read the cluster again and reopen the watch (the r key)."""
        self.app.reload_cluster()  # type: ignore[attr-defined]

    # -- the app's watch: recorded here, in the order things happen; drawn by messages --

    def feed_read(self, read: ClusterRead) -> None:
        self._rows.replace((n.node_id, n) for n in read.nodes.nodes)
        self._replicas = {r.replica_id: r for r in read.replicas.replicas}
        self._engines = list(read.engines.engines)
        self.post_message(NodesLoaded(read.nodes))

    def feed_event(self, event: WatchEvent) -> None:
        if event.topic == "nodes":
            self._record_node(event.key, event.node)
        elif event.topic == "replicas":
            self._record_replica(event.key, event.replica)
        elif event.topic == "engines":
            self.load_engines()  # the event names the node only: read them again
            return
        else:
            return
        if self._changed.up():
            self.post_message(NodesChanged())

    def feed_failed(self, error: LlmgwError, retry_in_s: float | None) -> None:
        self.post_message(AdminFailed(error, retry_in_s=retry_in_s))

    # -- workers: the only code here that talks to gatewayd --------------------

    @work(exclusive=True, exit_on_error=False, group="nodes-engines")
    async def load_engines(self) -> None:
        try:
            engines = list((await self._client.list_engines()).engines)
        except LlmgwError:
            return  # the pane keeps the engines it had; r reads them again
        self.post_message(EnginesLoaded(engines))

    def _record_node(self, node_id: str, view: NodeView | None) -> None:
        if view is None:
            self._rows.drop(node_id)
        else:
            self._rows.put(node_id, view)

    def _record_replica(self, replica_id: str, view: ReplicaView | None) -> None:
        if view is None:
            self._replicas.pop(replica_id, None)
        else:
            self._replicas[replica_id] = view

    # -- message handlers: widgets only ----------------------------------------

    @property
    def _views(self) -> dict[str, NodeView]:
        return self._rows.views

    def on_nodes_loaded(self, message: NodesLoaded) -> None:
        self._loaded = True
        self.draw_now()

    def on_node_changed(self, message: NodeChanged) -> None:
        self._record_node(message.node_id, message.view)
        self._show_details()
        self.draw_later()

    def on_nodes_changed(self, message: NodesChanged) -> None:
        self._changed.down()
        self._show_details()
        self.draw_later()

    def _show_details(self) -> None:
        """An open node's details follow it live (the screen under them does not draw)."""
        details = self.app.screen
        if isinstance(details, NodeDetails):
            view = self._views.get(details.node_id)
            if view is not None:
                details.show(view)

    def draw(self) -> None:
        self._rows.flush(self.query_one("#nodes", DataTable))
        if self._loaded:
            self._show_counts()
        else:
            self._show_pane()

    def on_engines_loaded(self, message: EnginesLoaded) -> None:
        self._engines = message.engines
        self.draw_later()

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def on_node_acted(self, message: NodeActed) -> None:
        self.on_node_changed(NodeChanged(message.view.node_id, message.view))
        self.draw_now()
        self._say(message.text)

    def on_node_removed(self, message: NodeRemoved) -> None:
        self.on_node_changed(NodeChanged(message.reply.node_id, None))
        self.draw_now()
        self._say(removed_node_text(message.reply))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self._open_details(str(event.row_key.value))

    def action_details(self) -> None:
        node_id = self.selected_node_id()
        if node_id is not None:
            self._open_details(node_id)

    def _open_details(self, node_id: str) -> None:
        view = self._views.get(node_id)
        if view is not None:
            self.app.push_screen(NodeDetails(self._client, view))

    def on_node_action_failed(self, message: NodeActionFailed) -> None:
        self._say(describe(message.error), error=True)

    def _say(self, text: str, *, error: bool = False) -> None:
        """What the last action did, or why it was refused, until the next action."""
        line = self.query_one("#action-line", Static)
        line.update(text)
        line.set_class(error, "-error")
        line.display = True

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_pane()
        self.refresh_bindings()

    # -- what the actions and the pane read ----------------------------------------

    def selected_node_id(self) -> str | None:
        table = next(self.query("#nodes").results(DataTable), None)  # none before compose
        return None if table is None else selected_key(table)

    def selected_node(self) -> NodeView | None:
        """The node under the cursor, as last read."""
        node_id = self.selected_node_id()
        return self._views.get(node_id) if node_id is not None else None

    def drain(self, node_id: str) -> Drain | None:
        """How the node's drain stands (None when it is not draining)."""
        view = self._views.get(node_id)
        if view is None or not view.draining:
            self._drain_total.pop(node_id, None)
            return None
        drain = drain_of(node_id, self._replicas.values(), self._drain_total.get(node_id, 0))
        self._drain_total[node_id] = drain.total
        return drain

    def _show_pane(self) -> None:
        view = self.selected_node()
        pane = self.query_one("#node-pane")
        pane.display = view is not None
        if view is None:
            return
        drain = self.drain(view.node_id)
        # Drawn again only when something it shows changed (an update lays the screen out).
        here = tuple(replicas_on(view.node_id, self._replicas.values()))
        key = (view, here, id(self._engines), drain)
        if key == self._pane_key:
            return
        self._pane_key = key
        body = node_pane(view, self._replicas.values(), self._engines, drain)
        self.query_one("#node-pane-body", Static).update(body)

    def _show_counts(self) -> None:
        nodes = self._views.values()
        ready = sum(1 for n in nodes if n.state == "ready")
        status = self.query_one("#status", Static)
        show_text(status, f"Nodes: {len(nodes)} ({ready} ready) · live from {self._client.address}")
        status.set_class(False, "-error")
        self.query_one("#empty").display = not self._views
        self.query_one("#nodes").display = bool(self._views)
        self._show_pane()
        view = self.selected_node()
        self.bindings_for(view and (view.node_id, view.state, view.cordoned, view.draining))
