"""How admin replies look to people (``--json`` prints them as they are)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmgw.present.clusterfmt import control_planes_table, leader_words
from llmgw.present.mirrorfmt import mirror_status_line
from llmgw.present.nodefmt import NO_NODES, NODE_COLUMNS, node_cells, node_details
from llmgw.present.opsfmt import (
    NO_WARNINGS,
    WARNING_COLUMNS,
    removed_node_text,
    restart_text,
    warning_cells,
)
from llmgw.present.output import renders
from proto.llmgw.v1 import (
    ListNodesReply,
    NodeView,
    RemoveNodeReply,
    RestartReplicaReply,
    StatusReply,
    WarningsReply,
)


def nodes_table(nodes: list[NodeView]) -> Table:
    t = Table(title=f"Nodes ({len(nodes)})", title_justify="left")
    for col in NODE_COLUMNS:
        t.add_column(col)
    for n in nodes:
        t.add_row(*node_cells(n))
    return t


@renders(ListNodesReply)
def _nodes(reply: ListNodesReply):
    if not reply.nodes:
        return Text(NO_NODES)
    return nodes_table(reply.nodes)


@renders(NodeView)
def _node(n: NodeView):
    return node_details(n)


@renders(StatusReply)
def _status(s: StatusReply):
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    for k, v in [
        ("cluster", s.cluster_name),
        ("version", s.version),
        ("role", "leader" if s.leader else "standby"),
        ("leader", leader_words(s)),
        ("store", s.store_backend),
        ("up since", s.started_at),
        ("agent port", s.agent_listen),
        ("API", s.gateway_url or s.http_listen),
        ("nodes", f"{s.nodes_total} ({s.nodes_ready} ready, {s.nodes_not_ready} not ready)"),
    ]:
        t.add_row(k, v)
    # The mirrors in the order nodes and the control plane try them.
    for i, m in enumerate(s.mirrors):
        t.add_row("mirrors" if i == 0 else "", mirror_status_line(m))
    if len(s.control_planes) > 1:
        # Several control planes share the store: each, its role and how it is.
        return Group(t, Text(""), control_planes_table(s.control_planes, s.control_plane_id))
    return t


@renders(RemoveNodeReply)
def _removed(r: RemoveNodeReply):
    return Text(removed_node_text(r))


@renders(RestartReplicaReply)
def _restarted(r: RestartReplicaReply):
    return Text(restart_text(r))


@renders(WarningsReply)
def _warnings(reply: WarningsReply):
    if not reply.warnings:
        return Text(f"No warnings since {reply.since}." if reply.since else NO_WARNINGS)
    t = Table(title=f"Warnings since {reply.since}", title_justify="left")
    for col in WARNING_COLUMNS:
        t.add_column(col, overflow="fold")
    for w in reply.warnings:
        t.add_row(*warning_cells(w))
    return t
