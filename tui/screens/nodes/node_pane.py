"""The Nodes screen's pane for the selected node: GPUs, replicas, engines, warnings, drain.

Pure drawing from the replies ``llmgw ctl nodes``, ``replicas`` and
``engines`` print: each GPU with a bar of the memory its node measured in
use and the replicas placed on it; replicas on the CPU; every engine with
its install state in the node's own words; the host's warnings (no AVX2 …);
and, while the node drains, how many of its replicas are left to move.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from llmgw.present.modelfmt import HOLDING, state_text
from llmgw.present.nodefmt import node_state
from llmgw.present.opsfmt import host_warnings
from proto.llmgw.v1 import EngineView, NodeView, ReplicaView
from tui.screens.bars import memory_bar, progress

ENGINE_STYLE = {"installed": "green", "installing": "yellow", "failed": "red", "skipped": "dim"}


@dataclass
class Drain:
    """A drain as seen so far: the most replicas the node had to move, and those left."""

    total: int
    left: int
    stopping: int

    @property
    def done(self) -> bool:
        return self.left == 0 and self.stopping == 0


def replicas_on(node_id: str, replicas: Iterable[ReplicaView]) -> list[ReplicaView]:
    """The replicas holding (or about to hold) resources on the node."""
    return [r for r in replicas if r.node_id == node_id and r.state in HOLDING]


def drain_of(node_id: str, replicas: Iterable[ReplicaView], seen_total: int) -> Drain:
    """Where a drain stands: replicas not yet replaced are left; replaced ones are stopping."""
    here = replicas_on(node_id, replicas)
    left = sum(1 for r in here if r.state != "draining")
    stopping = len(here) - left
    return Drain(total=max(seen_total, left + stopping), left=left, stopping=stopping)


def replica_word(r: ReplicaView) -> Text:
    """ "sim-chat-ab12 ready", with the download's share while it fetches."""
    word = Text.assemble(r.replica_id, " ", state_text(r.state))
    if r.fetch and r.fetch.bytes_total:
        share = 100 * r.fetch.bytes_done // r.fetch.bytes_total
        word.append(f" {share}%", style="cyan")
    return word


def _joined(words: list[Text]) -> Text:
    out = Text()
    for i, w in enumerate(words):
        if i:
            out.append(", ")
        out.append_text(w)
    return out


def gpu_table(view: NodeView, here: list[ReplicaView]) -> Table | Text:
    """One row per GPU: index, name, memory bar, the replicas on it; then the CPU's."""
    used = {s.index: s.memory_used_bytes for s in view.gpu_samples}
    t = Table.grid(padding=(0, 1))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(no_wrap=True, overflow="ellipsis", max_width=24)
    t.add_column(no_wrap=True)
    t.add_column(overflow="fold")
    for g in view.gpus:
        on_it = [replica_word(r) for r in here if g.index in r.gpu_indexes]
        t.add_row(
            f"GPU {g.index}",
            g.name,
            memory_bar(used.get(g.index, 0), g.memory_total_bytes),
            _joined(on_it) if on_it else Text("free", style="dim"),
        )
    on_cpu = [replica_word(r) for r in here if not r.gpu_indexes]
    if on_cpu or not view.gpus:
        t.add_row("CPU", "", "", _joined(on_cpu) if on_cpu else Text("nothing", style="dim"))
    return t


def engines_line(node_id: str, engines: list[EngineView]) -> Text:
    mine = [e for e in engines if e.node_id == node_id]
    if not mine:
        return Text("none reported yet", style="dim")
    words = []
    for e in mine:
        word = Text.assemble(
            (e.engine, "bold"),
            f" {e.version}" if e.version else "",
            " ",
            (e.state, ENGINE_STYLE.get(e.state, "")),
        )
        if e.message and e.state != "installed":
            word.append(f" ({e.message})", style="dim")
        words.append(word)
    return _joined(words)


def node_pane(
    view: NodeView,
    replicas: Iterable[ReplicaView],
    engines: list[EngineView] | None,
    drain: Drain | None,
    note: str = "",
) -> RenderableType:
    """Everything the pane shows for one node; ``note`` says what could not be read."""
    here = replicas_on(view.node_id, replicas)
    head = Text.assemble((view.node_id, "bold"), " ", node_state(view))
    if view.reason:
        head.append(f" · {view.reason}", style="dim")
    parts: list[RenderableType] = [head]
    if drain is not None:
        if drain.done:
            parts.append(
                Text(
                    f"Drained: nothing runs on {view.node_id}. Remove it (x) or uncordon it (c).",
                    style="green",
                )
            )
        else:
            line = Text("Draining ")
            line.append_text(progress(drain.total - drain.left, drain.total, unit="moved"))
            line.append(f" · {drain.left} left to move")
            if drain.stopping:
                line.append(f", {drain.stopping} stopping")
            parts.append(line)
    parts.append(gpu_table(view, here))
    engine_line = Text("Engines: ", style="bold")
    if engines is None:
        engine_line.append("unknown", style="dim")
    else:
        engine_line.append_text(engines_line(view.node_id, engines))
    parts.append(engine_line)
    for w in host_warnings(view.host):
        parts.append(Text(f"⚠ {w}", style="yellow"))
    if note:
        parts.append(Text(note, style="dim"))
    return Group(*parts)
