"""How the node console's Overview reads: one function per line or table row, no widgets.

Kept apart from the screen so what a row says can be checked without a
terminal, and so the screen stays a thin layer that puts these in place.
"""

from __future__ import annotations

import time

from rich.text import Text

from llmgw.agent_status import AgentStatus, ControlPlaneState, EngineReport, ShardReport
from llmgw.inventory import GpuInfo
from llmgw.present.nodefmt import bandwidth_text, index_ranges, pcie_text
from tui.node.gpus import GpuReading
from tui.node.probe import PlaneAnswer

PLANE_COLUMNS = ("CONTROL PLANE", "FROM", "AGENT", "ANSWERS", "LAST SUCCESS")
GPU_COLUMNS = ("#", "NAME", "MEMORY", "UTIL", "TEMP", "MODELS", "PCIE", "NVLINK")
ENGINE_COLUMNS = ("ENGINE", "VERSION", "STATE", "THE NODE SAYS")
SHARD_COLUMNS = ("MODEL", "STATE", "PORT", "PID", "GPUS", "REASON")

AGENT_STATE_STYLE = {
    "connected": "green",
    "connecting": "yellow",
    "reconnecting": "yellow",
    "starting": "yellow",
    "stopping": "dim",
}
ENGINE_STATE_STYLE = {
    "installed": "green",
    "installing": "yellow",
    "failed": "red",
    "skipped": "dim",
}
SHARD_STATE_STYLE = {"ready": "green", "failed": "red", "stopped": "dim"}
BAR_WIDTH = 10
# No model on a GPU reads as this, not as an empty cell.
NONE = "-"


def size(n: int) -> str:
    """Bytes for people: 1 decimal under 100, none above ("7.5 GiB", "450 GiB")."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{n} B"


def clock(unix: float | None) -> str:
    """A moment as local time: "14:03:07" today, "Mar 02 14:03" before."""
    if not unix:
        return "never"
    t = time.localtime(unix)
    if time.strftime("%Y%m%d", t) == time.strftime("%Y%m%d"):
        return time.strftime("%H:%M:%S", t)
    return time.strftime("%b %d %H:%M", t)


def ago(unix: float | None, now: float | None = None) -> str:
    if not unix:
        return "never"
    seconds = max(0.0, (time.time() if now is None else now) - unix)
    if seconds < 60:
        return f"{seconds:.0f} s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} d ago"


def agent_line(s: AgentStatus) -> Text:
    """The agent in one line: node, state since when, version, pid."""
    t = Text()
    t.append(f"Node {s.node_id}", style="bold")
    if s.hostname and s.hostname != s.node_id:
        t.append(f" ({s.hostname})")
    t.append(" · agent ")
    t.append(s.state, style=AGENT_STATE_STYLE.get(s.state, ""))
    if s.state == "connected" and s.connected_to:
        t.append(f" to {s.connected_to}")
    t.append(f" since {clock(s.state_since_unix)}")
    t.append(f" · llmgw {s.version or '?'} · pid {s.pid}")
    t.append(f" · memory {bandwidth_text(s.mem_bandwidth_gbs)}")
    return t


def plane_cells(p: ControlPlaneState, answer: PlaneAnswer | None) -> tuple[str | Text, ...]:
    if p.connected:
        agent = Text("connected", style="green")
    elif p.last_error:
        agent = Text(f"{p.last_error} ({ago(p.last_error_unix)})", style="red")
    else:
        agent = Text("not dialled yet", style="dim")
    last_success = "now" if p.connected else ago(p.last_success_unix)
    return (p.address, p.source, agent, answer_cell(answer), last_success)


def answer_cell(answer: PlaneAnswer | None) -> Text:
    if answer is None:
        return Text("not asked", style="dim")
    return Text(answer.words, style="green" if answer.answers else "red")


def memory_bar(used: int, total: int, width: int = BAR_WIDTH) -> Text:
    """ "███░░░░░░░ 7.5/24.0 GiB": filled in proportion, red when nearly full."""
    if total <= 0:
        return Text("?", style="dim")
    share = min(max(used / total, 0.0), 1.0)
    filled = round(share * width)
    style = "red" if share >= 0.9 else "yellow" if share >= 0.7 else "green"
    t = Text()
    t.append("█" * filled, style=style)
    t.append("░" * (width - filled), style="dim")
    t.append(f" {used / 2**30:.1f}/{total / 2**30:.1f} GiB")
    return t


def models_on(gpu: GpuReading, shards: list[ShardReport]) -> list[str]:
    """The node's shards on ``gpu``: placed on its index, or with a process on the card."""
    names = []
    for s in shards:
        if s.state in ("stopped", "failed"):
            continue
        if gpu.index in s.gpu_indexes or (s.pid and s.pid in gpu.pids):
            name = s.model or s.replica_id or s.shard_id
            if name not in names:
                names.append(name)
    return names


def gpu_cells(
    gpu: GpuReading, shards: list[ShardReport], facts: GpuInfo | None = None
) -> tuple[str | Text, ...]:
    """One unit's row; ``facts`` (the agent's, else the reading's own) give its links."""
    util = "?" if gpu.utilization_percent is None else f"{gpu.utilization_percent}%"
    temp = "?" if gpu.temperature_c is None else f"{gpu.temperature_c}°C"
    models = ", ".join(models_on(gpu, shards)) or NONE
    facts = facts or gpu.facts
    name = gpu.name
    if facts is not None and facts.mig_instance and "MIG" not in name:
        name = f"{name} MIG {facts.mig_profile}"
    if facts is not None and facts.mig_instance:
        pcie, nvlink = f"of GPU {facts.mig_parent_index}", NONE
    elif facts is not None:
        pcie, nvlink = pcie_text(facts), index_ranges(list(facts.nvlink_peers))
    else:
        pcie = nvlink = NONE
    return (
        str(gpu.index),
        Text(name),
        memory_bar(gpu.memory_used_bytes, gpu.memory_total_bytes),
        util,
        temp,
        models,
        pcie,
        nvlink,
    )


def engine_cells(e: EngineReport) -> tuple[str | Text, ...]:
    version = "-".join(p for p in (e.version, e.variant) if p) or NONE
    return (
        e.engine,
        version,
        Text(e.state, style=ENGINE_STATE_STYLE.get(e.state, "")),
        e.message,
    )


def shard_cells(s: ShardReport) -> tuple[str | Text, ...]:
    model = s.model or s.replica_id or s.shard_id
    if s.adopted:
        model += " (adopted)"
    gpus = ",".join(str(i) for i in s.gpu_indexes) or (s.compute_backend or NONE)
    return (
        model,
        Text(s.state, style=SHARD_STATE_STYLE.get(s.state, "yellow")),
        str(s.port or NONE),
        str(s.pid or NONE),
        gpus,
        s.reason,
    )


def disk_lines(s: AgentStatus) -> Text:
    t = Text()
    for i, d in enumerate(s.disks):
        if i:
            t.append("\n")
        t.append(f"{d.what:<8} ", style="bold")
        if d.error:
            t.append(f"{d.path}: cannot be read ({d.error})", style="red")
            continue
        low = d.total_bytes and d.free_bytes / d.total_bytes < 0.1
        t.append(f"{size(d.free_bytes)} free", style="red" if low else "")
        t.append(f" of {size(d.total_bytes)} · {d.path}")
    return t


def warning_lines(s: AgentStatus) -> Text:
    if not s.warnings:
        return Text("No warnings in the last hour.", style="dim")
    t = Text()
    for i, w in enumerate(reversed(s.warnings)):  # newest first
        if i:
            t.append("\n")
        t.append(clock(w.at_unix), style="yellow")
        t.append(f"  {w.text}")
    return t
