"""How a node reads to people, shared by ``llmgw ctl`` and the console.

The rich table ``llmgw ctl nodes`` prints and the console's Nodes screen build
their rows from ``node_cells``; ``llmgw ctl node show`` and the console's node
details draw ``node_details``. So the two can never disagree about what a
node's state, memory or GPUs look like.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmgw.inventory import GpuInfo
from llmgw.labels import labels_text
from proto.llmgw.v1 import Gpu, NodeView

NODE_COLUMNS = ("NODE", "STATE", "REASON", "OS", "ARCH", "CPUS", "MEMORY", "GPUS", "LABELS")
GPU_COLUMNS = ("#", "NAME", "MEMORY", "CC", "PCI", "PCIE", "NVLINK", "MIG")
# What an empty cluster says, with the next step, in the command and the console alike.
NO_NODES = "No nodes yet. Add one: llmgw node add HOST (or run llmgw up here)."
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
    cards = ", ".join(f"{c}× {name}" for name, c in names.items())
    taken = {i for i, b in n.gpu_bytes_taken.items() if b > 0}
    free = sum(1 for g in n.gpus if g.index not in taken)
    return f"{cards} ({'all' if free == len(n.gpus) else free} free)"


def os_name(n: NodeView) -> str:
    h = n.host
    if not h:
        return ""
    name = f"{h.os_id} {h.os_version_id}".strip()
    # A fake inventory (tests, demos) must never pass for real hardware on screen.
    return name + " (fake)" if h.fake else name


def node_cells(n: NodeView) -> tuple[str | Text, ...]:
    """One node's cells, in the order of ``NODE_COLUMNS``."""
    h = n.host
    return (
        n.node_id,
        node_state(n),
        n.reason,
        os_name(n),
        h.arch if h else "",
        str(h.cpu_count) if h else "",
        gib(h.memory_total_bytes) if h else "",
        gpu_summary(n),
        labels_text(n.labels),
    )


def node_facts(n: NodeView) -> list[tuple[str, str | Text]]:
    """A node's details as (label, value) pairs: state, then host facts."""
    h = n.host
    rows: list[tuple[str, str | Text]] = [
        ("node", n.node_id),
        ("hostname", n.hostname),
        ("state", node_state(n)),
        ("reason", n.reason),
        ("since", n.state_since),
        ("address", n.address),
        ("labels", labels_text(n.labels)),
        ("version", n.version),
        ("last heartbeat", n.last_heartbeat_at),
    ]
    if h:
        rows += [
            ("os", f"{h.os_id} {h.os_version_id} (like {' '.join(h.os_id_like) or '-'})"),
            ("arch", h.arch),
            (
                "cpus",
                f"{h.cpu_count} (AVX2: {'yes' if h.avx2 else 'no'})"
                + (f", {n.cores_taken} reserved by replicas" if n.cores_taken else ""),
            ),
            ("memory", gib(h.memory_total_bytes)),
            ("memory bandwidth", bandwidth_text(h.mem_bandwidth_gbs)),
            ("free disk", gib(h.disk_free_bytes)),
            ("nvidia driver", h.nvidia_driver_version or h.gpu_note or "-"),
            ("probe", h.probe + (" (fake inventory)" if h.fake else "")),
        ]
        if h.warnings:
            rows.append(("warnings", Text("\n".join(h.warnings), style="yellow")))
    return rows


def bandwidth_text(gbs: float) -> str:
    """The host's measured memory bandwidth, or that it is not measured yet."""
    return f"{gbs:.1f} GB/s (measured)" if gbs else "not measured yet"


def pcie_text(gpu: Gpu | GpuInfo) -> str:
    """The PCIe link as generation×lanes, with the most it can do where that differs.

    "4×16", "1×16 (max 5×16)" (a card idles at Gen1), "-" when not read.
    """
    if not gpu.pcie_gen and not gpu.pcie_width:
        return "-"
    now = f"{gpu.pcie_gen or '?'}×{gpu.pcie_width or '?'}"
    most = f"{gpu.pcie_gen_max or gpu.pcie_gen}×{gpu.pcie_width_max or gpu.pcie_width}"
    return now if most == now else f"{now} (max {most})"


def index_ranges(indexes: list[int]) -> str:
    """GPU indexes as runs: [1, 2, 3, 5] is "1-3,5"; [] is "-"."""
    runs: list[list[int]] = []
    for i in sorted(set(indexes)):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs) or "-"


def mig_text(gpu: Gpu | GpuInfo) -> str:
    """A card's MIG mode, or which card a MIG instance is carved from and how big."""
    if gpu.mig_instance:
        return f"{gpu.mig_profile or 'instance'} of GPU {gpu.mig_parent_index}"
    return gpu.mig_mode or "-"


def gpu_cells(gpu: Gpu) -> tuple[str | Text, ...]:
    """One GPU's cells, in the order of ``GPU_COLUMNS``."""
    return (
        str(gpu.index),
        # Text, not markup: a bus id like 00000000:AB:00.0 holds rich's ":ab:" emoji code.
        Text(gpu.name),
        gib(gpu.memory_total_bytes),
        gpu.compute_capability,
        Text(gpu.pci_bus_id),
        pcie_text(gpu),
        index_ranges(list(gpu.nvlink_peers)),
        mig_text(gpu),
    )


def node_details(n: NodeView) -> Group:
    """One node drawn for people: its state and host facts, then a table of its GPUs."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for k, v in node_facts(n):
        facts.add_row(k, v)
    parts: list[Table] = [facts]
    if n.gpus:
        gpus = Table(title="GPUs", title_justify="left")
        for col in GPU_COLUMNS:
            gpus.add_column(col)
        for gpu in n.gpus:
            gpus.add_row(*gpu_cells(gpu))
        parts.append(gpus)
    return Group(*parts)
