"""The Nodes screen's Label dialog: what ``llmgw ctl node label NODE k=v … --rm k`` sends.

Labels to set and keys to remove, checked as the command checks them
(``llmgw.labels``) before anything is sent. The node's current labels are
shown for reference: its agent.yaml's with the operator's over them; removing
an operator's label brings back agent.yaml's value, if there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.widgets import Input, Label, Static

from llmgw.errors import UsageError
from llmgw.labels import check_keys, labels_text, parse_assignments
from proto.llmgw.v1 import NodeView
from tui.screens.dialogs import FormDialog


@dataclass(frozen=True)
class LabelChange:
    """What the dialog hands back: labels to set, keys to remove."""

    set: dict[str, str]
    remove: list[str]


class LabelDialog(FormDialog[LabelChange]):
    """Labels to set and to remove on one node."""

    OK_LABEL = "Label"

    def __init__(self, view: NodeView) -> None:
        super().__init__(f"Label {view.node_id}")
        self.view = view

    def fields(self) -> ComposeResult:
        yield Static(f"Now: {labels_text(self.view.labels)}", id="label-now")
        yield Label("Set, KEY=VALUE separated by spaces (zone=a llmgw.role=judge)")
        yield Input(placeholder="zone=a", id="label-set")
        yield Label("Remove, keys separated by spaces (agent.yaml's value, if any, comes back)")
        yield Input(placeholder="rack", id="label-rm")

    def result(self) -> LabelChange:
        set_ = parse_assignments(self.field("#label-set").split())
        remove = check_keys(self.field("#label-rm").split())
        if not set_ and not remove:
            raise UsageError("give labels to set (KEY=VALUE) or keys to remove")
        return LabelChange(set_, remove)
