"""How the nodes' weights caches read to people, in ``llmgw ctl weights`` and the console.

Both draw a node's line (``node_line``: what it holds of its limit and how the
limit was set) and its entries' rows (``weights_cells``, newest use first: the
bottom rows are the next to go when the cache passes its limit) under the same
headings, and say what a removal did with ``removed_text``. Sizes are binary
(``12.3 GiB``: what the limit is set in); last uses relative ("3 h ago").
"""

from __future__ import annotations

import time

from rich.text import Text

from proto.llmgw.v1 import CachedWeights, NodeWeights, RemoveWeightsReply

# The source last: it is long (a URL, a file in a repository at a commit).
WEIGHTS_COLUMNS = ("KEY", "SIZE", "LAST USED", "IN USE BY", "SOURCE")
NO_ENTRIES = "Nothing cached."
NOT_REPORTED = "has not said what its weights cache holds yet"


def weights_key(name: str) -> str:
    """A name of weights as the cache's keys are written: ``hf:org/repo@commit`` is
    ``hf/org/repo/commit``, ``hf:org/repo`` is ``hf/org/repo`` (every commit of it)."""
    if name.startswith("hf:"):
        repo, _, commit = name[3:].partition("@")
        name = f"hf/{repo}" + (f"/{commit}" if commit else "")
    return name.strip("/")


def bytes_text(n: int) -> str:
    """Bytes for people, binary: 12.3 GiB, 512 MiB, 4.0 KiB, 17 B."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{max(n, 0)} B"


def ago_text(unix_ms: int, now_s: float | None = None) -> str:
    """How long ago, coarsely (so that two looks a moment apart agree): "3 h ago"."""
    if unix_ms <= 0:
        return "-"
    secs = max(0, int((now_s if now_s is not None else time.time()) - unix_ms / 1000))
    if secs < 60:
        return "just now"
    if secs < 7200:
        return f"{secs // 60} min ago"
    if secs < 172800:
        return f"{secs // 3600} h ago"
    return f"{secs // 86400} d ago"


def sorted_entries(entries: list[CachedWeights]) -> list[CachedWeights]:
    """Newest use first: the last rows are the ones the cache gives up first."""
    return sorted(entries, key=lambda e: (-e.last_used_unix_ms, e.key))


def in_use_text(e: CachedWeights) -> Text:
    if e.used_by:
        return Text(", ".join(e.used_by), style="green")
    return Text("unused", style="dim")


def weights_cells(e: CachedWeights, now_s: float | None = None) -> tuple[str | Text, ...]:
    size = bytes_text(e.size_bytes) + (" (partial)" if e.partial else "")
    return (e.key, size, ago_text(e.last_used_unix_ms, now_s), in_use_text(e), e.source or "-")


def limit_words(n: NodeWeights) -> str:
    """How the limit was set: "30% of disk", or the cap where that is lower."""
    r = n.report
    if r is None:
        return ""
    share = r.disk_total_bytes * r.limit_percent // 100
    if r.limit_max_bytes and r.limit_max_bytes < share:
        return f"weights_cache_max_bytes, under {r.limit_percent}% of disk"
    return f"{r.limit_percent}% of disk"


def node_line(n: NodeWeights) -> Text:
    """'node n1: 12.3 GiB of 40.0 GiB limit (30% of disk), 80.1 GiB free on disk'."""
    r = n.report
    line = Text(f"node {n.node_id}: ", style="bold")
    if not n.reported_at or r is None:
        line.append(NOT_REPORTED, style="yellow")
        return line
    over = r.total_bytes > r.limit_bytes
    line.append(
        f"{bytes_text(r.total_bytes)} of {bytes_text(r.limit_bytes)} limit",
        style="red" if over else "",
    )
    line.append(f" ({limit_words(n)}), {bytes_text(r.disk_free_bytes)} free on disk")
    if not n.connected:
        line.append(f" · not connected; as it said at {n.reported_at}", style="yellow")
    return line


def node_notes(n: NodeWeights) -> list[Text]:
    """What the node said besides its entries: why it stays over, what it removed lately."""
    r = n.report
    out = []
    if r is not None and r.note:
        out.append(Text(f"  {r.note}", style="yellow"))
    if r is not None and r.evicted:
        out.append(Text(f"  removed to stay within the limit: {', '.join(r.evicted)}", style="dim"))
    return out


def removed_text(r: RemoveWeightsReply) -> Text:
    """What a removal did: what went and what it freed, what stayed and why."""
    t = Text()
    if r.removed:
        t.append(f"Removed from {r.node_id}: {', '.join(r.removed)}")
        t.append(f" ({bytes_text(r.freed_bytes)} freed).")
    else:
        t.append(f"Nothing removed from {r.node_id}.")
    for kept in r.kept:
        t.append(f"\nKept {kept}", style="yellow")
    return t
