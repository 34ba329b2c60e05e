"""Driving the cluster console against a live cluster, for tests/tui/parity/test_parity.py.

``Live`` runs a declared ``llmgw ctl`` command with ``--json`` against the
cluster the console shows (Typer's CliRunner, LLMGW_HOME the cluster's, in a
thread: the cluster answers on the test's event loop); ``agree`` waits until
what a screen shows equals what the command says. ``SCREENS`` says, per
screen, how to open it and what to compare.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text
from textual.binding import Binding
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Sparkline, Static, Tree
from typer.testing import CliRunner

from llmgw.admin_client import AdminClient
from llmgw.cli.main import app as llmgw_cli
from llmgw.present.keyfmt import key_cells, limit_text, tenant_line
from llmgw.present.modelfmt import (
    history_cells,
    model_cells,
    placement_summary,
    replica_cells,
)
from llmgw.present.nodefmt import node_cells, node_details
from llmgw.present.usagefmt import usage_cells
from proto.llmgw.v1 import (
    KeyView,
    ListEnginesReply,
    ListKeysReply,
    ListModelsReply,
    ListNodesReply,
    ListReplicasReply,
    ListTenantsReply,
    NodeView,
    PlacementReply,
    ReplicaLogsReply,
    StatusReply,
    UsageReply,
    WarningsReply,
)
from tests.cluster_fixture import Cluster, point_the_cli_at  # noqa: F401  (used by the parity tests)
from tui import parity
from tui.app import LlmgwApp
from tui.parity import PARITY, Item
from tui.screens.cluster.overview import (
    gpu_memory,
    gpus_card,
    models_card,
    nodes_card,
    warnings_body,
)
from tui.screens.cluster.summary import ClusterSummary
from tui.screens.models.replicas import ReplicaDetails, replica_body
from tui.screens.nodes.node_pane import node_pane

SIZE = (160, 48)
SEARCH = "Acme/ml/search"
SOURCE = "/models/none.gguf"
# A sim replica is ready in a second or two; 30 s covers a loaded machine.
READY_ATTEMPTS = 600
# Replicas to restart, one per test (each restart stops the one it names).
RESTARTED = ("parity-restart", "parity-restart-2")


@dataclass
class Live:
    """The cluster, a client for the console, and ``llmgw ctl … --json`` against the same."""

    cluster: Cluster
    client: AdminClient
    # The stop event of each node's agent, by node id.
    agents: dict[str, asyncio.Event]
    # What makes batches through the Batch API (tests/tui/parity/batches.py).
    batches: Any = None
    # The company MCP servers the gateway serves (tests/tui/parity/mcp_gateway.py).
    mcp: Any = None

    async def ctl(self, argv: tuple[str, ...], **values: Any) -> dict:
        """Run one declared command (its placeholders filled from ``values``) with --json."""
        args = [word.format(**values) for word in argv] + ["--json"]
        env = {"LLMGW_HOME": str(self.cluster.paths.home), "COLUMNS": "200"}

        def run():
            return CliRunner().invoke(llmgw_cli, args, env=env)

        result = await asyncio.to_thread(run)
        assert result.exit_code == 0, f"llmgw {' '.join(args)}: {result.output}"
        return json.loads(result.stdout)  # the whole of stdout is the admin reply

    async def steps(self, argv: tuple[str, ...], *options: str, **values: Any) -> list[dict]:
        """Run a declared command outside ``ctl`` (``node add {host}``) with ``options`` and
        --json: its step events, one JSON object a line, the last the result."""
        args = [word.format(**values) for word in argv] + [*options, "--json"]
        env = {"LLMGW_HOME": str(self.cluster.paths.home), "COLUMNS": "200"}

        def run():
            return CliRunner().invoke(llmgw_cli, args, env=env)

        result = await asyncio.to_thread(run)
        events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        assert events and events[-1]["step"] == "result", f"llmgw {' '.join(args)}: {result.output}"
        assert result.exit_code == events[-1]["result"]["exit_code"]
        return events

    async def said(self, item: Item, index: int = 0, **values: Any) -> dict:
        """What the ``index``-th command declared for ``item`` answers."""
        return await self.ctl(PARITY[item].commands[index], **values)

    async def shown_by(self, item: Item, **values: Any) -> dict:
        """What the command declared to show ``item``'s change answers."""
        mirror = PARITY[item]
        assert mirror.shown_by, f"{parity.describe_item(item)} declares no shown_by"
        return await self.ctl(mirror.shown_by, **values)


# -- reading the console --------------------------------------------------------------------


def plain(renderable: Any, width: int = 150) -> str:
    """What a terminal ``width`` columns wide shows of ``renderable``."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def cells(row) -> list[str]:
    return [str(c) for c in row]


def table_rows(app: LlmgwApp, selector: str) -> dict[str, list[str]]:
    """A DataTable's rows as plain text, by row key."""
    t = app.screen.query_one(selector, DataTable)
    return {str(key.value): cells(t.get_row(key)) for key in t.rows}


def table_list(app: LlmgwApp, selector: str) -> list[list[str]]:
    """A DataTable's rows as plain text, top to bottom (rows without keys)."""
    t = app.screen.query_one(selector, DataTable)
    return [cells(t.get_row_at(i)) for i in range(t.row_count)]


def static_text(app: LlmgwApp, selector: str) -> str:
    return plain(app.screen.query_one(selector, Static).content)


def screen_is(app: LlmgwApp, name: str) -> bool:
    return type(app.screen).__name__ == name


async def until(pilot: Pilot, cond: Callable[[], bool], *, tries: int = 200) -> None:
    """Let the console and the cluster work until ``cond`` holds; at most ``tries`` × 50 ms."""
    for _ in range(tries):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"gave up waiting for {cond}")


async def agree(
    pilot: Pilot,
    shown: Callable[[], Any],
    said: Callable[[], Awaitable[Any]],
    *,
    again: Callable[[], None] | None = None,
    tries: int = 100,
) -> Any:
    """Wait until what the screen shows equals what the command says, and return it.

    Both read a live cluster a moment apart: a replica may change state or a
    heartbeat land between the two, so they are read again (``again`` has the
    screen read its own again first) until they agree. Never empty: an empty
    screen agreeing with an empty reply proves nothing.
    """
    # The screen fills in first (cheap to look at); the command is asked once it has.
    for _ in range(100):
        if shown():
            break
        await pilot.pause(0.05)
    got = want = None
    for _ in range(tries):
        want = await said()
        got = shown()
        if got == want and want:
            return got
        if again is not None:
            again()
        await pilot.pause(0.1)
    assert got == want, f"the screen and its command disagree:\nscreen:  {got}\ncommand: {want}"
    raise AssertionError("both were empty: nothing was compared")


def key_of(owner: str, action: str) -> str:
    """The key bound to ``action`` on the class named ``owner`` (its first key)."""
    cls = next(c for c in parity.console_classes() if c.__qualname__ == owner)
    for binding in cls.__dict__.get("BINDINGS", []):
        b = binding if isinstance(binding, Binding) else Binding(*binding)
        if b.action == action:
            return b.key.split(",")[0]
    raise AssertionError(f"{owner} binds no key to {action}")


def mode_key(mode: str) -> str:
    return key_of("LlmgwApp", f"switch_mode('{mode}')")


# The mode each screen and dialog lives in. A test starts the console there (the keys
# that switch modes have tests of their own), or elsewhere when the test is the key's.
MODE_OF = {
    "OverviewScreen": "overview",
    "NodesScreen": "nodes",
    "NodeDetails": "nodes",
    "NodeWeights": "nodes",
    "ModelsScreen": "models",
    "ExplainPlacement": "models",
    "ResourcesDialog": "models",
    "ServeDialog": "models",
    "AddNodeDialog": "nodes",
    "LabelDialog": "nodes",
    "ReplicasScreen": "replicas",
    "ReplicaDetails": "replicas",
    "KeysScreen": "keys",
    "LimitsDialog": "keys",
    "UsageScreen": "usage",
    "BatchesScreen": "batches",
    "MirrorScreen": "mirror",
    "McpScreen": "mcp",
    "SettingsScreen": "settings",
    "SettingDialog": "settings",
}
SCREEN_OF_MODE = {MODE_OF[name]: name for name in MODE_OF if name.endswith("Screen")}


def first_mode(item: Item) -> str:
    cls, _ = item
    mirror = PARITY[item]
    if cls == "LlmgwApp" and mirror.opens:
        # Start away from the screen the key opens.
        return "nodes" if MODE_OF[mirror.opens] == "overview" else "overview"
    return MODE_OF[cls]


async def to_mode(pilot: Pilot, mode: str) -> None:
    """Be on ``mode``'s screen: pressing its key when the console is elsewhere."""
    screen = SCREEN_OF_MODE[mode]
    if not screen_is(pilot.app, screen):
        await pilot.press(mode_key(mode))
    await until(pilot, lambda: screen_is(pilot.app, screen))


async def press(pilot: Pilot, owner: str, action: str, then: str) -> None:
    """Press the key of ``owner``'s ``action`` and wait for the screen named ``then``."""
    await pilot.press(key_of(owner, action))
    await until(pilot, lambda: screen_is(pilot.app, then))


async def cursor_to(pilot: Pilot, selector: str, key: str) -> None:
    app = pilot.app
    await until(pilot, lambda: key in table_rows(app, selector))
    t = app.screen.query_one(selector, DataTable)
    t.focus()
    t.move_cursor(row=t.get_row_index(key))
    await pilot.pause()


# -- screens: how to get there, and what to compare ---------------------------------------

Step = Callable[[LlmgwApp, Pilot, Live], Awaitable[None]]


async def to_nodes(app, pilot, live):
    await to_mode(pilot, "nodes")


async def check_nodes(app, pilot, live):
    item = ("NodesScreen", None)

    async def said():
        reply = ListNodesReply.from_dict(await live.said(item, 0))
        return {n.node_id: cells(node_cells(n)) for n in reply.nodes}

    got = await agree(pilot, lambda: table_rows(app, "#nodes"), said)
    assert {"cpu-node", "gpu-box"} <= set(got)

    # The pane of the selected node: its GPUs and the replicas on them, its engines.
    await cursor_to(pilot, "#nodes", "gpu-box")

    async def pane_said():
        view = NodeView.from_dict(await live.ctl(("ctl", "node", "show", "gpu-box")))
        replicas = ListReplicasReply.from_dict(await live.said(item, 1)).replicas
        engines = ListEnginesReply.from_dict(await live.said(item, 2)).engines
        return plain(node_pane(view, replicas, engines, None))

    text = await agree(pilot, lambda: static_text(app, "#node-pane-body"), pane_said)
    assert "GPU 7" in text and "Engines:" in text


async def to_node_details(app, pilot, live):
    await to_nodes(app, pilot, live)
    await cursor_to(pilot, "#nodes", "gpu-box")
    await press(pilot, "NodesScreen", "details", "NodeDetails")


async def check_node_details(app, pilot, live):
    node_id = app.screen.node_id

    async def said():
        view = NodeView.from_dict(await live.said(("NodeDetails", None), node=node_id))
        return plain(node_details(view))

    # Its last heartbeat moves every few seconds: have the dialog read it again each try.
    text = await agree(
        pilot, lambda: static_text(app, "#details-body"), said, again=app.screen.reload
    )
    assert "8× " not in text and "NVIDIA H100 80GB HBM3" in text


async def to_overview(app, pilot, live):
    await to_mode(pilot, "overview")


async def check_overview(app, pilot, live):
    item = ("OverviewScreen", None)
    parts = ("#card-nodes", "#card-gpus", "#card-models", "#gpu-body", "#warn-body")

    def shown():
        return [static_text(app, p) for p in parts] + [app.title, app.sub_title]

    async def said():
        status = StatusReply.from_dict(await live.said(item, 0))
        summary = ClusterSummary()
        summary.load(
            status,
            list(ListNodesReply.from_dict(await live.said(item, 1)).nodes),
            list(ListModelsReply.from_dict(await live.said(item, 2)).models),
            list(ListReplicasReply.from_dict(await live.said(item, 3)).replicas),
            [],
            list(WarningsReply.from_dict(await live.said(item, 4)).warnings),
            now=0.0,
        )
        drawn = [nodes_card, gpus_card, models_card, gpu_memory, warnings_body]
        return [plain(f(summary)) for f in drawn] + [
            f"llmgw · {status.cluster_name}",
            summary.state_line(),
        ]

    got = await agree(pilot, shown, said)
    assert "ready" in got[0] and "serving" in got[2]

    # Requests: rates are the console's own, over successive `ctl status` counters;
    # the count beside them is the command's.
    # Read again until they agree, as above: a request of the cluster may end in
    # an error between the screen's last status and the command's.
    def errors_shown() -> str:
        requests = static_text(app, "#card-requests")
        return "measuring" if "measuring" in requests else requests.split("(")[-1].split(")")[0]

    async def errors_said() -> str:
        if errors_shown() == "measuring":
            return "measuring"
        return str(StatusReply.from_dict(await live.said(item, 0)).errors_total)

    await agree(pilot, errors_shown, errors_said)


async def to_models(app, pilot, live):
    await to_mode(pilot, "models")


async def check_models(app, pilot, live):
    async def said():
        reply = ListModelsReply.from_dict(await live.said(("ModelsScreen", None)))
        return {m.spec.name: cells(model_cells(m)) for m in reply.models}

    got = await agree(pilot, lambda: table_rows(app, "#models"), said)
    assert "sim-chat" in got


async def to_explain(app, pilot, live):
    await to_models(app, pilot, live)
    await cursor_to(pilot, "#models", "sim-chat")
    await press(pilot, "ModelsScreen", "explain", "ExplainPlacement")


async def check_explain(app, pilot, live):
    name = app.screen.model_name

    def shown():
        return static_text(app, "#explain-summary"), table_list(app, "#explain-reasons")

    async def said():
        reply = PlacementReply.from_dict(await live.said(("ExplainPlacement", None), model=name))
        summary = Text(reply.explanation) if reply.explanation else placement_summary(reply)
        return plain(summary), [[n.node_id, n.reason] for n in reply.reasons]

    await agree(pilot, shown, said, again=app.screen.reload)


async def to_serve(app, pilot, live):
    await to_models(app, pilot, live)
    await press(pilot, "ModelsScreen", "serve", "ServeDialog")


async def to_add_node(app, pilot, live):
    await to_nodes(app, pilot, live)
    await press(pilot, "NodesScreen", "add_node", "AddNodeDialog")


async def to_replicas(app, pilot, live):
    await to_mode(pilot, "replicas")


async def check_replicas(app, pilot, live):
    async def said():
        reply = ListReplicasReply.from_dict(await live.said(("ReplicasScreen", None)))
        return {r.replica_id: cells(replica_cells(r)) for r in reply.replicas}

    got = await agree(pilot, lambda: table_rows(app, "#replicas"), said)
    assert any(row[1] == "sim-chat" and row[4] == "ready" for row in got.values())


def _replica_of(app, model: str) -> str:
    """A ready replica of ``model`` on the Replicas screen ("" while there is none)."""
    rows = table_rows(app, "#replicas")
    return next((k for k, r in rows.items() if r[1] == model and r[4] == "ready"), "")


async def to_replica_details(app, pilot, live):
    await to_replicas(app, pilot, live)
    await until(pilot, lambda: bool(_replica_of(app, "sim-chat")))
    await cursor_to(pilot, "#replicas", _replica_of(app, "sim-chat"))
    await press(pilot, "ReplicasScreen", "history", "ReplicaDetails")


async def check_replica_details(app, pilot, live, *, item: Item = ("ReplicaDetails", None)):
    dialog = app.screen
    replica_id = dialog.replica_id

    def shown():
        return static_text(app, "#replica-facts"), table_list(app, "#replica-history")

    async def said():
        reply = ListReplicasReply.from_dict(await live.said(("ReplicaDetails", None), 0))
        r = next(r for r in reply.replicas if r.replica_id == replica_id)
        return plain(replica_body(r)), [cells(history_cells(e)) for e in r.history]

    await agree(pilot, shown, said)
    await check_log_tail(app, pilot, live, item=item)


async def check_log_tail(app, pilot, live, *, item: Item = ("ReplicaDetails", "logs")):
    dialog = app.screen
    index = 1 if item == ("ReplicaDetails", None) else 0

    async def said():
        argv = PARITY[item].commands[index]
        reply = ReplicaLogsReply.from_dict(
            await live.ctl(argv, replica=dialog.replica_id, lines=ReplicaDetails.LOG_LINES)
        )
        return "\n".join(reply.lines) or "(the engine has written nothing yet)"

    def shown():
        return str(app.screen.query_one("#replica-logs", Static).content)

    await agree(pilot, shown, said, again=dialog.action_logs)


async def to_keys(app, pilot, live):
    await to_mode(pilot, "keys")
    # Nothing announces keys or levels: what a test made just now is read with r.
    await pilot.press(key_of("LlmgwApp", "refresh"))
    await until(pilot, lambda: bool(tree_levels(app)))


def tree_levels(app) -> dict[str, str]:
    """Every level of the tree by path, as its line reads ("search  project · 2 keys")."""
    out: dict[str, str] = {}

    def walk(node) -> None:
        for child in node.children:
            out[child.data] = str(child.label)
            walk(child)

    walk(app.screen.query_one("#tenants", Tree).root)
    return out


async def check_keys(app, pilot, live):
    item = ("KeysScreen", None)

    async def said():
        levels: dict[str, str] = {}
        for index in range(3):  # org list, team list, project list
            for v in ListTenantsReply.from_dict(await live.said(item, index)).tenants:
                count = f"{v.keys} {'key' if v.keys == 1 else 'keys'}"
                levels[v.path] = f"{v.path.rsplit('/', 1)[-1]}  {v.kind} · {count}"
        keys = ListKeysReply.from_dict(await live.said(item, 3)).keys
        return levels, {k.key_id: cells(key_cells(k)) for k in keys}

    # The tree's root is selected: the table holds every key.
    levels, keys = await agree(
        pilot, lambda: (tree_levels(app), table_rows(app, "#keys")), said, again=app.screen.reload
    )
    assert SEARCH in levels and {r[3] for r in keys.values()} >= {"web", "batch"}

    # A project selected: its line is the project's of `ctl project list`.
    await select_level(pilot, SEARCH)
    projects = ListTenantsReply.from_dict(await live.said(item, 2)).tenants
    search = next(t for t in projects if t.path == SEARCH)
    assert static_text(app, "#level").strip() == tenant_line(search)


async def select_level(pilot: Pilot, path: str) -> None:
    app = pilot.app
    await until(pilot, lambda: path in tree_levels(app))
    tree = app.screen.query_one("#tenants", Tree)

    def find(node):
        if node.data == path:
            return node
        return next((n for c in node.children if (n := find(c)) is not None), None)

    tree.focus()
    tree.move_cursor(find(tree.root))
    await until(pilot, lambda: app.screen.shown_path == path)


async def key_named(live: Live, name: str) -> KeyView:
    keys = ListKeysReply.from_dict(await live.shown_by(("KeysScreen", "new_key"))).keys
    return next(k for k in keys if k.name == name)


async def to_limits(app, pilot, live):
    await to_keys(app, pilot, live)
    web = await key_named(live, "web")
    await cursor_to(pilot, "#keys", web.key_id)
    await press(pilot, "KeysScreen", "limits", "LimitsDialog")


async def check_limits_dialog(app, pilot, live):
    dialog = app.screen
    keys = ListKeysReply.from_dict(await live.said(("LimitsDialog", None))).keys
    key = next(k for k in keys if k.key_id == dialog.scope)
    for name, field_id in dialog.FIELD_IDS.items():
        typed = dialog.query_one(f"#{field_id}", Input).value
        assert typed == limit_text(key.limits, name), name
    assert key.limits.rpm == 60


async def to_usage(app, pilot, live):
    await to_mode(pilot, "usage")
    await until(pilot, lambda: app.screen.reply is not None)


async def check_usage(app, pilot, live, *, item: Item = ("UsageScreen", None)):
    screen = app.screen

    def shown():
        series = screen.query_one("#usage-series", Sparkline).data
        return table_list(app, "#usage"), list(series or [])

    async def said():
        by, from_, to = screen.asked
        reply = UsageReply.from_dict(
            await live.said(item, by=",".join(by), **{"from": from_, "to": to})
        )
        return [cells(usage_cells(g, by)) for g in reply.groups], list(reply.series)

    # The table's sums and the sparkline's requests over the period.
    rows, _ = await agree(pilot, shown, said)
    assert any(SEARCH in row or "sim-chat" in row for row in rows)


SCREENS: dict[str, tuple[Step, Step | None]] = {
    # name: (how to open it from a fresh console, what to compare once shown)
    "OverviewScreen": (to_overview, check_overview),
    "NodesScreen": (to_nodes, check_nodes),
    "NodeDetails": (to_node_details, check_node_details),
    "ModelsScreen": (to_models, check_models),
    "ExplainPlacement": (to_explain, check_explain),
    "ServeDialog": (to_serve, None),
    "AddNodeDialog": (to_add_node, None),
    "ReplicasScreen": (to_replicas, check_replicas),
    "ReplicaDetails": (to_replica_details, check_replica_details),
    "KeysScreen": (to_keys, check_keys),
    "LimitsDialog": (to_limits, check_limits_dialog),
    "UsageScreen": (to_usage, check_usage),
}
