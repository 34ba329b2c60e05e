"""The Overview: the cluster at a glance, the console's first screen.

Four cards — nodes ready/total, GPUs in use/total with the memory the nodes
measured, models serving/total with replicas ready/wanted, requests and
errors per second — then every node's GPU memory as bars, then the warnings
of the last hour with what to do about each.

It draws the ``ClusterSummary`` the app keeps current (``tui.screens.
cluster.cluster_feed``): the same replies ``llmgw ctl status``, ``nodes``, ``models``
and ``warnings`` print, followed live through ``Watch``. It reads nothing
itself.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from llmgw.present.clusterfmt import header_line, leader_words
from llmgw.present.nodefmt import NO_NODES
from llmgw.present.opsfmt import NO_WARNINGS, warning_line
from tui.screens.bars import bar, gib, memory_bar
from tui.screens.cluster.summary import ClusterSummary
from tui.screens.live import show_text
from tui.screens.shell import KeyFooter, ShellHeader

CARDS = ("nodes", "gpus", "models", "requests")
# An overview, not a list: the Nodes screen has every node (its table draws only
# the rows in sight; this list is drawn whole at every change).
GPU_ROWS_MAX = 50


def nodes_card(s: ClusterSummary) -> Text:
    ready, total = s.nodes_ready()
    card = Text(f"{ready}/{total} ready", style="bold")
    cordoned = sum(1 for n in s.nodes.values() if n.cordoned)
    draining = sum(1 for n in s.nodes.values() if n.draining)
    if draining:
        card.append(f"\n{draining} draining", style="yellow")
    elif cordoned:
        card.append(f"\n{cordoned} cordoned", style="yellow")
    elif total and ready < total:
        card.append(f"\n{total - ready} not ready", style="red")
    return card


def gpus_card(s: ClusterSummary) -> Text:
    in_use, total = s.gpus_in_use()
    if not total:
        return Text("none\nmodels run on CPUs", style="dim")
    cards = s.gpus()
    used = sum(c.memory_used_bytes for c in cards)
    size = sum(c.memory_total_bytes for c in cards)
    card = Text(f"{in_use}/{total} in use\n", style="bold")
    card.append_text(bar(used, size, 14))
    card.append(f"\n{gib(used)}/{gib(size)} GiB")
    return card


def models_card(s: ClusterSummary) -> Text:
    serving, total = s.models_serving()
    card = Text(f"{serving}/{total} serving", style="bold")
    ready, wanted = s.replicas_ready()
    card.append(f"\nreplicas {ready}/{wanted}", style="" if ready >= wanted else "yellow")
    return card


def requests_card(s: ClusterSummary) -> Text:
    rates = s.rates()
    if rates is None:
        return Text("measuring…", style="dim")
    card = Text(f"{rates.requests_per_s:.1f}/s", style="bold")
    errors = s.status.errors_total if s.status else 0
    style = "red" if rates.errors_per_s > 0 else ""
    card.append(f"\nerrors {rates.errors_per_s:.1f}/s ({errors})", style=style)
    return card


def gpu_memory(s: ClusterSummary) -> RenderableType:
    """One line per node: its cards, the memory in use on them, how many hold replicas."""
    if not s.nodes:
        return Text(NO_NODES)
    by_node: dict[str, list] = {}
    for c in s.gpus():
        by_node.setdefault(c.node_id, []).append(c)
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(no_wrap=True, overflow="ellipsis", max_width=20)
    t.add_column(no_wrap=True)
    t.add_column(no_wrap=True)
    ready_on: dict[str, int] = {}
    for r in s.replicas.values():
        if r.state == "ready":
            ready_on[r.node_id] = ready_on.get(r.node_id, 0) + 1
    ordered = sorted(s.nodes)
    for node_id in ordered[:GPU_ROWS_MAX]:
        mine = by_node.get(node_id)
        if not mine:
            t.add_row(node_id, "CPU only", "", f"{ready_on.get(node_id, 0)} replicas ready")
            continue
        names: dict[str, int] = {}
        for c in mine:
            names[c.name] = names.get(c.name, 0) + 1
        t.add_row(
            node_id,
            ", ".join(f"{n}× {name}" for name, n in names.items()),
            memory_bar(
                sum(c.memory_used_bytes for c in mine), sum(c.memory_total_bytes for c in mine)
            ),
            f"{sum(1 for c in mine if c.replicas)}/{len(mine)} in use",
        )
    if len(ordered) > GPU_ROWS_MAX:
        more = Text(f"… and {len(ordered) - GPU_ROWS_MAX} more nodes: ", style="dim")
        more.append("Nodes (n) lists every one", style="dim bold")
        return Group(t, more)
    return t


def warnings_body(s: ClusterSummary) -> RenderableType:
    if not s.warnings:
        return Text(NO_WARNINGS, style="green")
    return Group(*(warning_line(w) for w in s.warnings))


class OverviewScreen(Screen[None]):
    """The cluster at a glance, drawn from the app's ``ClusterSummary``."""

    def __init__(self, summary: ClusterSummary, address: str) -> None:
        super().__init__()
        self._summary = summary
        self._address = address
        self._problem = ""
        # Changes arrived while another screen was shown: drawn on return.
        self._stale = False

    def compose(self) -> ComposeResult:
        yield ShellHeader("overview")
        yield Static(f"Reading the cluster from {self._address}…", id="status")
        with Horizontal(id="cards"):
            for name in CARDS:
                yield Static(classes="card", id=f"card-{name}")
        yield Static("GPU memory", classes="section")
        with VerticalScroll(id="gpu-list"):
            yield Static(id="gpu-body")
        yield Static("Warnings of the last hour", classes="section")
        with VerticalScroll(id="warn-list"):
            yield Static(id="warn-body")
        yield KeyFooter()

    def on_mount(self) -> None:
        titles = {"nodes": "Nodes", "gpus": "GPUs", "models": "Models", "requests": "Requests"}
        for name, title in titles.items():
            self.query_one(f"#card-{name}").border_title = title
        self._draw()

    def on_screen_resume(self) -> None:
        if self._stale:
            self._draw()

    def reload(self) -> None:
        """The r key: the app reads the whole cluster again."""
        reload = getattr(self.app, "reload_cluster", None)
        if callable(reload):
            reload()

    def show(self, problem: str | None = None) -> None:
        """Draw the summary as it is now; ``problem``: what keeps it from being current."""
        if problem is not None:
            self._problem = problem
        if not self.is_mounted:
            return
        if not self.is_current:
            self._stale = True  # nobody is looking: drawn when shown again
            return
        self._draw()

    def _draw(self) -> None:
        self._stale = False
        s = self._summary
        status = self.query_one("#status", Static)
        if self._problem:
            show_text(status, self._problem)
        elif s.loaded:
            planes = header_line(s.status)
            # Several control planes: who leads, since when, and the store's state.
            extra = f" · {leader_words(s.status)}" if planes and s.status is not None else ""
            show_text(status, f"Live from {self._address}{extra}")
        status.set_class(bool(self._problem), "-error")
        if not s.loaded:
            return
        show_text(self.query_one("#card-nodes", Static), nodes_card(s))
        show_text(self.query_one("#card-gpus", Static), gpus_card(s))
        show_text(self.query_one("#card-models", Static), models_card(s))
        show_text(self.query_one("#card-requests", Static), requests_card(s))
        self.query_one("#gpu-body", Static).update(gpu_memory(s))
        self.query_one("#warn-body", Static).update(warnings_body(s))
