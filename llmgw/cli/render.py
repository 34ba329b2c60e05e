"""How admin replies look to people (``--json`` prints them as they are)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmgw.output import renders
from proto.llmgw.v1 import ListNodesReply, NodeView, StatusReply

STATE_STYLE = {"ready": "green", "not_ready": "red", "registering": "yellow", "gone": "dim"}


def gib(n: int) -> str:
    return f"{n / 2**30:.0f} GiB" if n else "-"


def node_state(n: NodeView) -> Text:
    t = Text(n.state, style=STATE_STYLE.get(n.state, ""))
    if n.cordoned:
        t.append(" cordoned", style="yellow")
    if n.draining:
        t.append(" draining", style="yellow")
    return t


def gpu_summary(n: NodeView) -> str:
    if not n.gpus:
        return f"none ({n.host.gpu_note})" if n.host and n.host.gpu_note else "none"
    names: dict[str, int] = {}
    for g in n.gpus:
        names[g.name] = names.get(g.name, 0) + 1
    return ", ".join(f"{c}× {name}" for name, c in names.items())


def nodes_table(nodes: list[NodeView]) -> Table:
    t = Table(title=f"Nodes ({len(nodes)})", title_justify="left")
    for col in ("NODE", "STATE", "REASON", "OS", "ARCH", "CPUS", "MEMORY", "GPUS"):
        t.add_column(col)
    for n in nodes:
        h = n.host
        os_name = f"{h.os_id} {h.os_version_id}".strip() if h else ""
        if h and h.fake:
            os_name += " (fake)"
        t.add_row(n.node_id, node_state(n), n.reason, os_name, h.arch if h else "",
                  str(h.cpu_count) if h else "", gib(h.memory_total_bytes) if h else "",
                  gpu_summary(n))
    return t


@renders(ListNodesReply)
def _nodes(reply: ListNodesReply):
    if not reply.nodes:
        return Text("No nodes yet. Add one: llmgw node add HOST (or run llmgw up here).")
    return nodes_table(reply.nodes)


@renders(NodeView)
def _node(n: NodeView):
    h = n.host
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    rows = [
        ("node", n.node_id), ("hostname", n.hostname), ("state", node_state(n)),
        ("reason", n.reason), ("since", n.state_since), ("address", n.address),
        ("version", n.version), ("last heartbeat", n.last_heartbeat_at),
    ]
    if h:
        rows += [
            ("os", f"{h.os_id} {h.os_version_id} (like {' '.join(h.os_id_like) or '-'})"),
            ("arch", h.arch), ("cpus", f"{h.cpu_count} (AVX2: {'yes' if h.avx2 else 'no'})"),
            ("memory", gib(h.memory_total_bytes)), ("free disk", gib(h.disk_free_bytes)),
            ("nvidia driver", h.nvidia_driver_version or h.gpu_note or "-"),
            ("probe", h.probe + (" (fake inventory)" if h.fake else "")),
        ]
    for k, v in rows:
        t.add_row(k, v)
    parts = [t]
    if n.gpus:
        g = Table(title="GPUs", title_justify="left")
        for col in ("#", "NAME", "MEMORY", "CC", "PCI", "MIG"):
            g.add_column(col)
        for gpu in n.gpus:
            g.add_row(str(gpu.index), gpu.name, gib(gpu.memory_total_bytes),
                      gpu.compute_capability, gpu.pci_bus_id, gpu.mig_mode or "-")
        parts.append(g)
    return Group(*parts)


@renders(StatusReply)
def _status(s: StatusReply):
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    for k, v in [
        ("cluster", s.cluster_name), ("version", s.version),
        ("role", "leader" if s.leader else "standby"), ("store", s.store_backend),
        ("up since", s.started_at), ("agent port", s.agent_listen), ("http", s.http_listen),
        ("nodes", f"{s.nodes_total} ({s.nodes_ready} ready, {s.nodes_not_ready} not ready)"),
    ]:
        t.add_row(k, v)
    return t
