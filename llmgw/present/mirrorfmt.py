"""How the model mirror reads to people, in ``llmgw ctl mirror …`` and the console's Mirror screen.

Both draw their rows from the cell helpers here under the same headings:
mirrors (``mirror_cells``), held revisions (``revision_cells``), pulls under
way (``pull_cells``, ``progress_line``), peers (``peer_cells``), disk use
(``du_line``). Sizes are decimal (``253 MB``, ``1.2 GB``: what the hub and
``du --si`` say), rates per second, times left as ``2m 05s``. What an add
sends is built once, by ``add_request``, from what the command's options or
the console's dialog say.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from llmgw.errors import UsageError
from llmgw.present.usagefmt import short_time
from proto.llmgw.v1 import (
    MirrorAddRequest,
    MirrorDuReply,
    MirrorFileView,
    MirrorPeerView,
    MirrorPullView,
    MirrorRevisionView,
    MirrorView,
)

MIRROR_COLUMNS = ("MIRROR", "STATE", "USED", "QUOTA", "FREE", "REVISIONS", "CHECKED", "REASON")
# What a revision is comes first: in 80 columns its source may be cut, not its commit.
REVISION_COLUMNS = ("REPO", "COMMIT", "REFS", "SIZE", "FILES", "ADDED", "KIND", "SOURCE")
PULL_COLUMNS = ("PULL", "SOURCE", "STATE", "PROGRESS", "RATE", "ETA", "FILE")
PEER_COLUMNS = ("PEER", "STATE", "LAG", "BEHIND", "LAST SYNC", "REASON")
FILE_COLUMNS = ("PATH", "SIZE", "SHA256", "LFS", "PICKLE")

NO_MIRRORS = (
    "This cluster has no mirror: nodes fetch weights from where each model's source points. "
    "Run one: llmgw mirror serve (or llmgw up --mirror), then list it in server.yaml mirror.urls."
)
NO_REVISIONS = "The mirror holds nothing yet. Add a model: llmgw ctl mirror add hf:ORG/NAME@main"
NO_PEERS = "No peers. Keep another mirror in step with this one: llmgw ctl mirror peers add URL"

STATE_STYLE = {
    "up": "green",
    "down": "bold red",
    "unknown": "dim",
    "in_step": "green",
    "behind": "yellow",
    "syncing": "cyan",
    "queued": "dim",
    "resolving": "cyan",
    "fetching": "cyan",
    "done": "green",
    "failed": "bold red",
}
# A pull in one of these has ended.
PULL_ENDED = frozenset({"done", "failed"})
BAR_CELLS = 10
COMMIT_CHARS = 12


# -- figures ------------------------------------------------------------------------


def size_text(n: int) -> str:
    """Bytes for people, decimal: 253 MB, 1.23 GB, 512 B; "-" for none."""
    if n <= 0:
        return "0 B" if n == 0 else "-"
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= size:
            value = n / size
            # Three figures: 1.20 GB, 40.0 GB, 253 MB.
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f} {unit}"
    return f"{n} B"


def rate_text(bytes_s: float) -> str:
    return f"{size_text(int(bytes_s))}/s" if bytes_s > 0 else "-"


def duration_text(seconds: float) -> str:
    """Seconds for people: 42 s, 3m 05s, 2h 10m, 4d 3h."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def eta_text(p: MirrorPullView) -> str:
    if p.state in PULL_ENDED:
        return "-"
    return duration_text(p.eta_s) if p.eta_s > 0 else "?"


def lag_text(lag_s: float) -> str:
    """How long since everything a peer held was known here: "never" when never synced."""
    if lag_s < 0:
        return "never"
    if lag_s < 1:
        return "< 1 s"
    return duration_text(lag_s)


def quota_text(max_bytes: int) -> str:
    return size_text(max_bytes) if max_bytes > 0 else "none"


def state_text(state: str) -> Text:
    return Text((state or "-").replace("_", " "), style=STATE_STYLE.get(state, ""))


def short_commit(commit: str) -> str:
    return commit[:COMMIT_CHARS]


# -- rows -----------------------------------------------------------------------------


def mirror_cells(m: MirrorView) -> tuple[str | Text, ...]:
    """One mirror the cluster knows, as a row under ``MIRROR_COLUMNS``."""
    up = m.state == "up"
    return (
        m.url,
        state_text(m.state),
        size_text(m.used_bytes) if up else "-",
        quota_text(m.max_bytes) if up else "-",
        size_text(m.free_disk_bytes) if up else "-",
        str(m.revisions) if up else "-",
        short_time(m.checked_at) or "-",
        m.reason,
    )


def mirror_status_line(m: MirrorView) -> Text:
    """A mirror in ``ctl status``: ``http://m:7080 up · 1.20 GB used of 10.0 GB · 3 revisions``."""
    line = Text.assemble(m.url, " ", state_text(m.state))
    if m.state == "up":
        line.append(f" · {du_line(m.used_bytes, m.max_bytes, m.free_disk_bytes)}")
        line.append(f" · {m.revisions} revision{'' if m.revisions == 1 else 's'}")
    elif m.reason:
        line.append(f": {m.reason}", style="red" if m.state == "down" else "dim")
    return line


def revision_cells(r: MirrorRevisionView) -> tuple[str | Text, ...]:
    """One held revision as a row under ``REVISION_COLUMNS``."""
    kind = Text(r.kind or "model", style="" if r.kind in ("", "model") else "magenta")
    if r.has_pickle:
        kind.append(" pickle", style="yellow")
    return (
        r.repo,
        short_commit(r.commit),
        ", ".join(r.refs) or "-",
        size_text(r.size_bytes),
        str(r.files),
        short_time(r.added_at) or "-",
        kind,
        r.source,
    )


def progress_text(p: MirrorPullView) -> Text:
    """``███░░░░░░░ 80 MB/253 MB 31%``; the bytes alone while the total is not known."""
    style = STATE_STYLE.get(p.state, "cyan")
    if p.bytes_total <= 0:
        return Text(size_text(p.bytes_done) if p.bytes_done else "-", style="dim")
    done = min(p.bytes_done, p.bytes_total)
    filled = done * BAR_CELLS // p.bytes_total
    # Rounded down, so that 100 % means every byte held.
    pct = done * 100 // p.bytes_total
    return Text.assemble(
        ("█" * filled, style),
        ("░" * (BAR_CELLS - filled), "dim"),
        f" {size_text(done)}/{size_text(p.bytes_total)} {pct}%",
    )


def pull_cells(p: MirrorPullView) -> tuple[str | Text, ...]:
    """One pull or upload as a row under ``PULL_COLUMNS``."""
    return (
        p.pull_id,
        p.source,
        state_text(p.state),
        progress_text(p),
        rate_text(p.rate_bytes_s) if p.state not in PULL_ENDED else "-",
        eta_text(p),
        p.error if p.state == "failed" else p.file,
    )


def progress_line(p: MirrorPullView) -> Text:
    """One line for an add under way (the console's Add line, ctl's text with --detach)."""
    line = Text.assemble(state_text(p.state), " ", p.repo or p.source)
    if p.commit:
        line.append(f"@{short_commit(p.commit)}", style="dim")
    if p.state == "failed":
        line.append(f": {p.error}", style="red")
        return line
    if p.bytes_total <= 0 and p.state not in PULL_ENDED:
        # Queued or resolving: nothing to count yet.
        line.append(f"  ({p.pull_id})" if p.pull_id else "", style="dim")
        return line
    line.append("  ")
    line.append_text(progress_text(p))
    if p.files_total:
        line.append(f"  {p.files_done}/{p.files_total} files")
    if p.state not in PULL_ENDED:
        line.append(f"  {rate_text(p.rate_bytes_s)}  ETA {eta_text(p)}")
        if p.file:
            line.append(f"  {p.file}", style="dim")
    return line


def peer_cells(p: MirrorPeerView) -> tuple[str | Text, ...]:
    """One peer as a row under ``PEER_COLUMNS``."""
    return (
        p.url,
        state_text(p.state),
        lag_text(p.lag_s),
        str(p.behind),
        short_time(p.last_sync_at) or "never",
        p.reason,
    )


def file_cells(f: MirrorFileView) -> tuple[str | Text, ...]:
    return (
        f.path,
        size_text(f.size_bytes),
        f.sha256[:COMMIT_CHARS],
        "yes" if f.lfs else "",
        Text("pickle", style="yellow") if f.pickle else "",
    )


def du_line(used_bytes: int, max_bytes: int, free_disk_bytes: int) -> str:
    """``1.20 GB used of 10.0 GB (12%) · 40.0 GB free on disk``."""
    used = f"{size_text(used_bytes)} used"
    if max_bytes > 0:
        used += f" of {size_text(max_bytes)} ({used_bytes * 100 // max_bytes}%)"
    else:
        used += ", no quota"
    return f"{used} · {size_text(free_disk_bytes)} free on disk"


def du_facts(d: MirrorDuReply) -> list[tuple[str, str]]:
    """What ``ctl mirror du`` says above the largest revisions."""
    left = d.max_bytes - d.used_bytes if d.max_bytes > 0 else 0
    return [
        ("mirror", d.served_by or "-"),
        ("used", size_text(d.used_bytes)),
        ("quota", quota_text(d.max_bytes)),
        ("room left", size_text(max(left, 0)) if d.max_bytes > 0 else "up to the disk"),
        ("free on disk", size_text(d.free_disk_bytes)),
        ("unreferenced", f"{size_text(d.unreferenced_bytes)} (collected at the next removal)"),
    ]


# -- what an add or a removal sends ------------------------------------------------------


def split_target(text: str) -> tuple[str, str]:
    """``REPO[@REVISION]`` as ``rm`` takes it: (repo, revision; "" for all of them)."""
    repo, _, revision = text.strip().partition("@")
    if not repo or (text.strip().endswith("@") and not revision):
        raise UsageError(
            f"{text!r} names no repository",
            hint="write org/name, org/name@COMMIT or org/name@main (see llmgw ctl mirror list)",
        )
    return repo, revision


def add_request(
    source: str,
    *,
    include: list[str] = (),
    as_repo: str = "",
    allow_pickle: bool = False,
    wheels: bool = False,
    engine: bool = False,
    sha256: str = "",
    detach: bool = False,
) -> MirrorAddRequest:
    """What ``ctl mirror add`` (and the console's Add) sends, its options checked first.

    A local path is made absolute: gatewayd, on the same machine but in
    another directory, reads it and uploads it to the mirror.
    """
    source = source.strip()
    if not source:
        raise UsageError("say what to add", hint="e.g. llmgw ctl mirror add hf:org/name@main")
    if wheels and engine:
        raise UsageError("an add is --wheels or --engine, not both")
    sha256 = sha256.strip().lower()
    if engine and len(sha256) != 64:
        raise UsageError(
            "an engine archive is kept only with its pinned sha256",
            hint="give it: --sha256 followed by the 64 hex digits its release names",
        )
    kind = "wheel" if wheels else "engine" if engine else ""
    remote = source.startswith(("hf:", "https://", "http://"))
    if source.startswith("hf:"):
        repo = source.removeprefix("hf:").partition("@")[0]
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise UsageError(
                f"{source!r} is not hf:org/name[@revision]",
                hint="e.g. hf:google/gemma-3-270m-gguf@main",
            )
    elif source.startswith(("https://", "http://")) and not engine:
        raise UsageError(
            "a URL is added as an engine archive",
            hint="add --engine --sha256 X (the archive's pinned digest)",
        )
    if not remote:
        path = Path(source).expanduser().resolve()
        if not path.exists():
            raise UsageError(
                f"{source} does not exist", hint="give a file or folder on this machine"
            )
        source = str(path)
        if not kind and not as_repo:
            raise UsageError(
                f"say which org/name {path.name} is kept under",
                hint=f"add --as org/name (or --wheels for a folder of wheels): "
                f"llmgw ctl mirror add {source} --as local/{path.stem}",
            )
    return MirrorAddRequest(
        source=source,
        include=[g for g in include if g.strip()],
        as_repo=as_repo.strip(),
        allow_pickle=allow_pickle,
        kind=kind,
        sha256=sha256,
        detach=detach,
    )
