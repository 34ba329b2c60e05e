"""What the Nodes screen does to the selected node (cordon, uncordon, drain, remove), and Add node.

Each action calls the admin client method its command calls: ``c`` is
``llmgw ctl cordon NODE`` (or ``uncordon`` on a cordoned node), ``d`` is
``llmgw ctl drain NODE``, ``x`` is ``llmgw ctl node rm NODE``, ``l`` is
``llmgw ctl node label NODE k=v … --rm k`` (a dialog asks which), ``f`` opens
what the node keeps on its disk (``llmgw ctl weights NODE``, and ``weights rm``
from there: ``node_weights.py``). Drain and remove ask first. ``a`` opens the Add node dialog (``llmgw node add HOST``,
with each step's progress); it needs no selected node, nor any node at all. A refusal ("drain it first …") lands on the status line
with what to do; what changed shows in the row and the pane as the watch
reports it, the drain's progress with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

from textual import work
from textual.binding import Binding, BindingType
from textual.message import Message

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from proto.llmgw.v1 import NodeView, RemoveNodeReply
from tui.screens.common import Refused
from tui.screens.dialogs import Confirm
from tui.screens.nodes.add_node import AddNodeDialog
from tui.screens.nodes.label_dialog import LabelChange, LabelDialog
from tui.screens.nodes.node_pane import replicas_on
from tui.screens.nodes.node_weights import NodeWeights


class NodeActed(Message):
    """Cordon, uncordon or drain took; ``text`` says so, with the next step."""

    def __init__(self, view: NodeView, text: str) -> None:
        super().__init__()
        self.view = view
        self.text = text


class NodeActionFailed(Refused):
    """An action was refused or failed: the error says what to do."""


class NodeRemoved(Message):
    """gatewayd forgot the node (``remove_node``)."""

    def __init__(self, reply: RemoveNodeReply) -> None:
        super().__init__()
        self.reply = reply


class NodeActions:
    """The Nodes screen's actions on its selected node (mixed into ``NodesScreen``)."""

    # The screen's BINDINGS (Textual reads BINDINGS from widget classes only).
    NODE_BINDINGS: ClassVar[list[BindingType]] = [
        # One key, two actions: c uncordons a cordoned node and cordons any other.
        Binding("c", "cordon", "Cordon"),
        Binding("c", "uncordon", "Uncordon"),
        Binding("d", "drain", "Drain"),
        Binding("x,delete", "remove", "Remove"),
        Binding("l", "label", "Label"),
        Binding("a", "add_node", "Add node"),
        Binding("f", "weights", "Weights"),
        # Before the table's own Enter (select), so that the footer shows it.
        Binding("enter", "details", "Details", priority=True),
    ]
    ON_A_NODE: ClassVar[frozenset[str]] = frozenset(
        {"cordon", "uncordon", "drain", "remove", "label", "details", "weights"}
    )

    _client: AdminClient
    _replicas: dict
    selected_node: Callable[[], NodeView | None]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in self.ON_A_NODE:
            return True
        view = self.selected_node()
        if view is None:
            # Shown dimmed with nothing to act on; only one of the two c's.
            return False if action == "uncordon" else None
        if action == "cordon":
            return not view.cordoned
        if action == "uncordon":
            return view.cordoned
        return True

    # -- actions -------------------------------------------------------------------

    def action_cordon(self) -> None:
        view = self.selected_node()
        if view is not None:
            node_id = view.node_id
            self.run_node_action(
                self._client.cordon_node(node_id),
                f"Cordoned {node_id}: nothing new is placed on it. Undo: c",
            )

    def action_uncordon(self) -> None:
        view = self.selected_node()
        if view is not None:
            self.run_node_action(
                self._client.uncordon_node(view.node_id),
                f"Uncordoned {view.node_id}: placement may use it again.",
            )

    def action_drain(self) -> None:
        view = self.selected_node()
        if view is None:
            return
        node_id = view.node_id
        n = len(replicas_on(node_id, self._replicas.values()))
        question = (
            f"Drain {node_id}? Nothing new is placed on it, and its {n} "
            f"replica{'' if n == 1 else 's'} start elsewhere first, then stop here. "
            f"Undo with c (uncordon)."
        )

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_node_action(
                    self._client.drain_node(node_id),
                    f"Draining {node_id}: its replicas move; the pane shows how far.",
                )

        self.app.push_screen(Confirm(f"Drain {node_id}", question, "Drain"), confirmed)

    def action_remove(self) -> None:
        view = self.selected_node()
        if view is None:
            return
        node_id = view.node_id
        question = (
            f"Remove {node_id} from the cluster? gatewayd forgets it; if its agent "
            f"connects again it registers as a new node. Refused while replicas run on it."
        )

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_remove(node_id)

        self.app.push_screen(Confirm(f"Remove {node_id}", question, "Remove"), confirmed)

    def action_label(self) -> None:
        view = self.selected_node()
        if view is None:
            return
        node_id = view.node_id

        def given(change: LabelChange | None) -> None:
            if change is not None:
                self.run_node_action(
                    self._client.label_node(node_id, change.set, change.remove),
                    f"Labels of {node_id} changed; placement sees them at once.",
                )

        self.app.push_screen(LabelDialog(view), given)

    def action_weights(self) -> None:
        # What the node keeps on its disk, and removing it: `ctl weights NODE` / `weights rm`.
        view = self.selected_node()
        if view is not None:
            self.app.push_screen(NodeWeights(self._client, view.node_id))

    def action_add_node(self) -> None:
        # The new node's row comes by itself (the screen follows the watch); the line
        # above the table says it joined, read back with get_node like `ctl node show`.
        def added(node_id: str | None) -> None:
            if node_id:
                self.run_node_action(
                    self._client.get_node(node_id),
                    f"Added {node_id}. Next: serve a model on it (m, then a).",
                )

        self.app.push_screen(AddNodeDialog(getattr(self.app, "paths", None)), added)

    # -- workers ---------------------------------------------------------------------

    @work(exclusive=True, exit_on_error=False, group="nodes-action")
    async def run_node_action(self, call: Awaitable[NodeView], text: str) -> None:
        try:
            view = await call
        except LlmgwError as e:
            self.post_message(NodeActionFailed(e))
            return
        self.post_message(NodeActed(view, text))

    @work(exclusive=True, exit_on_error=False, group="nodes-action")
    async def run_remove(self, node_id: str) -> None:
        try:
            reply = await self._client.remove_node(node_id)
        except LlmgwError as e:
            self.post_message(NodeActionFailed(e))
            return
        self.post_message(NodeRemoved(reply))
