"""What a model's replicas hold on their nodes, and the cores it reserves — ``llmgw ctl model
resources``.

Opened with ``c`` on the Models screen. It reads the model, its replicas and the nodes
(as the command does) and draws them with the same helpers
(``llmgw.present.resourcesfmt``); a number typed and Enter dismisses it with the cores
each CPU replica should reserve, which the Models screen sends (``set_model_resources``,
as ``llmgw ctl model resources NAME --cores N``).
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.resourcesfmt import (
    NODE_COLUMNS,
    REPLICA_COLUMNS,
    ModelResources,
    model_resources,
    node_cells,
    profile_line,
    replica_cells,
)
from tui.screens.common import AdminFailed, describe, show_worker_error
from tui.screens.shell import KeyFooter

# The most cores a replica may reserve (the catalog's own bound).
MAX_CORES = 1024
HINT = "Enter reserves that many cores per CPU replica (0: none) · Esc closes"


class ResourcesRead(Message):
    """The model, its replicas and the nodes arrived."""

    def __init__(self, facts: ModelResources) -> None:
        super().__init__()
        self.facts = facts


def parse_cores(text: str) -> int | str:
    """A whole number of cores, or what is wrong with it in words."""
    text = text.strip()
    if not text.isdigit() or int(text) > MAX_CORES:
        return f"cores: a whole number from 0 to {MAX_CORES}, not {text!r}"
    return int(text)


class ResourcesDialog(ModalScreen[int | None]):
    """A model's replicas with what they hold, the nodes' cores, and the cores to reserve."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Close")]

    def __init__(self, client: AdminClient, name: str, cores: int) -> None:
        super().__init__()
        self._client = client
        self.model_name = name
        self._cores = cores

    def compose(self) -> ComposeResult:
        with Vertical(id="resources-box", classes="dialog"):
            yield Static(f"Asking gatewayd about {self.model_name}…", id="resources-profiles")
            replicas: DataTable = DataTable(id="resources-replicas", cursor_type="row")
            replicas.add_columns(*REPLICA_COLUMNS)
            yield replicas
            yield Static("CPU cores on the nodes", classes="dialog-heading")
            nodes: DataTable = DataTable(id="resources-nodes", cursor_type="row")
            nodes.add_columns(*NODE_COLUMNS)
            yield nodes
            yield Input(str(self._cores), id="resources-cores")
            yield Static(HINT, id="resources-status", classes="dialog-status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#resources-box").border_title = f"Resources of {self.model_name}"
        self.reload()

    def reload(self) -> None:
        self.read()

    @work(exclusive=True, exit_on_error=False, group="resources")
    async def read(self) -> None:
        c = self._client
        try:
            facts = model_resources(
                await c.get_model(self.model_name),
                await c.list_replicas(self.model_name),
                await c.list_nodes(),
            )
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(ResourcesRead(facts))

    def on_resources_read(self, message: ResourcesRead) -> None:
        facts = message.facts
        lines = "\n".join(profile_line(p) for p in facts.profiles)
        self.query_one("#resources-profiles", Static).update(Text(lines))
        replicas = self.query_one("#resources-replicas", DataTable)
        replicas.clear()
        for r in facts.replicas:
            replicas.add_row(*replica_cells(r), key=r.replica_id)
        replicas.display = bool(facts.replicas)
        nodes = self.query_one("#resources-nodes", DataTable)
        nodes.clear()
        for n in facts.nodes:
            nodes.add_row(*node_cells(n), key=n.node_id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        cores = parse_cores(event.value)
        if isinstance(cores, str):
            status = self.query_one("#resources-status", Static)
            status.update(cores)
            status.set_class(True, "-error")
            return
        self.dismiss(cores)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#resources-status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#resources-status", Static), event)
