"""The node console's Overview: this node's agent, control planes, GPUs, engines, disks, warnings.

A worker looks at the node every 2 s (``NodeProbe.look``: the agent's status
socket, NVML, a knock on each control plane, each capped at 2 s) and posts
``NodeLooked``; the handler only puts what it found in place. A part that
cannot be read says so where it would be, with what to do; the rest stays.
"""

from __future__ import annotations

import asyncio
import contextlib

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static
from textual.worker import Worker

from llmgw.agent_status import AgentNotRunning, AgentStatus, ControlPlaneState
from llmgw.aio import within
from tui.node import cells
from tui.node.probe import NodeFacts, NodeProbe
from tui.screens.common import describe, show_worker_error

REFRESH_S = 2.0

# The parts that only the agent can tell; hidden while it cannot be read.
AGENT_PARTS = ("#engines-part", "#shards-part", "#disks-part", "#warnings-part")


class NodeLooked(Message):
    """One look at the node is done (``NodeProbe.look``)."""

    def __init__(self, facts: NodeFacts) -> None:
        super().__init__()
        self.facts = facts


def _table(table_id: str, columns: tuple[str, ...]) -> DataTable:
    table: DataTable = DataTable(id=table_id, cursor_type="none", zebra_stripes=True)
    table.can_focus = False  # the page scrolls as one; rows have nothing to select
    for heading in columns:
        table.add_column(heading, key=heading.lower())
    return table


class OverviewScreen(Screen[None]):
    """This node at a glance, kept current every ``refresh_s`` seconds."""

    def __init__(self, probe: NodeProbe, *, refresh_s: float = REFRESH_S) -> None:
        super().__init__()
        self._probe = probe
        self._refresh_s = refresh_s
        self._again = asyncio.Event()
        self.facts: NodeFacts | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Reading the agent at {self._probe.status_socket}…", id="status")
        with VerticalScroll(id="overview"):
            yield Static(id="agent")
            with Vertical(id="planes-part", classes="part"):
                yield Static("Control planes", classes="heading")
                yield Static(id="planes-note", classes="note")
                yield _table("planes", cells.PLANE_COLUMNS)
            with Vertical(id="gpus-part", classes="part"):
                yield Static("GPUs", classes="heading")
                yield Static(id="gpu-note", classes="note")
                yield _table("gpus", cells.GPU_COLUMNS)
            with Vertical(id="engines-part", classes="part"):
                yield Static("Engines", classes="heading")
                yield _table("engines", cells.ENGINE_COLUMNS)
            with Vertical(id="shards-part", classes="part"):
                yield Static("Engines running for replicas", classes="heading")
                yield Static("None.", id="shards-empty", classes="note")
                yield _table("shards", cells.SHARD_COLUMNS)
            with Vertical(id="disks-part", classes="part"):
                yield Static("Free space", classes="heading")
                yield Static(id="disks")
            with Vertical(id="warnings-part", classes="part"):
                yield Static("Warnings from the last hour", classes="heading")
                yield Static(id="warnings")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#overview").focus()
        self.follow_node()

    def reload(self) -> None:
        """Look again now (the r key), without waiting for the next 2 s."""
        self._again.set()

    @work(exclusive=True, exit_on_error=False, group="node-look")
    async def follow_node(self) -> None:
        while True:
            self._again.clear()
            self.post_message(NodeLooked(await self._probe.look()))
            with contextlib.suppress(TimeoutError):
                await within(self._again.wait(), self._refresh_s)

    # -- message handlers: widgets only ----------------------------------------

    def on_node_looked(self, message: NodeLooked) -> None:
        facts = self.facts = message.facts
        status = self.query_one("#status", Static)
        status.update(
            f"Read at {cells.clock(facts.read_unix)} · every {self._refresh_s:g} s · "
            "r reads again now"
        )
        status.set_class(False, "-error")
        self._show_agent(facts)
        self._show_planes(facts)
        self._show_gpus(facts)
        if facts.status is not None:
            self._show_agent_parts(facts.status)
        for part in AGENT_PARTS:
            self.query_one(part).display = facts.status is not None

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def _show_agent(self, facts: NodeFacts) -> None:
        agent = self.query_one("#agent", Static)
        if facts.status is not None:
            agent.update(cells.agent_line(facts.status))
            agent.set_class(False, "-error")
            return
        error = facts.status_error
        text = describe(error) if error else "the agent's status is not known"
        if isinstance(error, AgentNotRunning):
            text += " · GPUs and control planes below are read without it"
        agent.update(Text(text))
        agent.set_class(True, "-error")

    def _show_planes(self, facts: NodeFacts) -> None:
        note = self.query_one("#planes-note", Static)
        table = self.query_one("#planes", DataTable)
        table.clear()
        if facts.status is not None:
            for p in facts.status.control_planes:
                table.add_row(*cells.plane_cells(p, facts.planes.get(p.address)))
            note.display = False
        else:
            for address in facts.plane_addresses:
                plane = ControlPlaneState(address=address)
                row = list(cells.plane_cells(plane, facts.planes.get(address)))
                row[2] = Text("agent not running", style="dim")
                table.add_row(*row)
            note.update(facts.planes_error)
            note.display = bool(facts.planes_error)
            note.set_class(bool(facts.planes_error), "-error")
        table.display = table.row_count > 0

    def _show_gpus(self, facts: NodeFacts) -> None:
        note = self.query_one("#gpu-note", Static)
        table = self.query_one("#gpus", DataTable)
        shards = facts.status.shards if facts.status is not None else []
        # The agent's view of each unit gives its links (PCIe, NVLink, MIG).
        known = {g.index: g for g in facts.status.gpus} if facts.status is not None else {}
        table.clear()
        for gpu in facts.gpus.gpus:
            table.add_row(*cells.gpu_cells(gpu, shards, known.get(gpu.index)))
        table.display = bool(facts.gpus.gpus)
        lines = []
        if facts.gpus.note:
            lines.append(facts.gpus.note)
        if facts.gpus.source.startswith("recorded:"):
            lines.append(f"recorded GPUs ({facts.gpus.source.partition(':')[2]}), not NVML's")
        probe = facts.status.probe if facts.status is not None else ""
        if probe.startswith("fake:"):
            lines.append(
                f"the agent reports recorded hardware ({probe}) to the cluster, not this machine's"
            )
        note.update("\n".join(lines))
        note.display = bool(lines)

    def _show_agent_parts(self, status: AgentStatus) -> None:
        engines = self.query_one("#engines", DataTable)
        engines.clear()
        for e in status.engines:
            engines.add_row(*cells.engine_cells(e))
        shards = self.query_one("#shards", DataTable)
        shards.clear()
        for s in status.shards:
            shards.add_row(*cells.shard_cells(s))
        shards.display = bool(status.shards)
        self.query_one("#shards-empty").display = not status.shards
        self.query_one("#disks", Static).update(cells.disk_lines(status))
        self.query_one("#warnings", Static).update(cells.warning_lines(status))
