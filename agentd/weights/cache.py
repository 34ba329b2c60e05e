"""A node's weights cache as entries: what each holds, when it was last used, what may go.

    <cache>/<model>/                       one entry: a model's fetched file(s) (fetcher.py)
    <cache>/hf/<org>/<repo>/<commit>/      one entry: a repository at one commit (repo.py)
    <cache>/.llmgw-last-used.json          key -> when a shard last started on it or left it
    <cache>/.removing-<key>-<token>/       an entry on its way out (renamed, then deleted)

An entry's key is its path under the cache. Its size is the bytes of every
file in it, a download in progress included (they are on the disk). It is in
use while a shard on the node runs on weights inside it, or is fetching into
it; an entry in use is never removed, whatever the limit says.

The limit is the lower of ``percent`` of the disk the cache is on and a cap in
bytes (0: none). Past it, unused entries go oldest-last-use first until the
cache is back within it (``plan_eviction``). An entry is removed by renaming it
out of the cache's view first, then deleting it: a crash halfway leaves a
``.removing-`` directory (deleted at the next start), never half an entry that
looks whole to the fetcher.

Everything here but ``plan_eviction`` and ``Use`` touches the disk: call it
through ``asyncio.to_thread`` (``detach`` is one rename and may be called in the
event loop, where no fetch can start between the last check and it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from llmgw.catalog.model import ModelSource
from llmgw.fsutil import write_atomic

log = logging.getLogger(__name__)

HF_DIR = "hf"
LAST_USED_FILE = ".llmgw-last-used.json"
REMOVING_PREFIX = ".removing-"
PARTIAL_SUFFIX = ".partial"
# fetcher.py's memo of a local file's sha256: no weights of its own.
LOCAL_MEMO = ".local.json"
# repo.py's record of a commit fetched whole.
COMPLETE_FILE = ".llmgw-complete.json"


@dataclass(frozen=True)
class Entry:
    """One entry of the cache, as found on the disk."""

    key: str
    path: Path
    # What was fetched there (hf:org/repo@commit:file, https://…), "" where unknown.
    source: str
    size_bytes: int
    last_used_unix_ms: int
    # It holds a download not finished (a .partial file, a repository not yet whole).
    partial: bool


@dataclass(frozen=True)
class Use:
    """A shard's hold on the cache.

    ``path`` is the weights it runs on ("" none, as the sim's; None unknown: an
    engine adopted from an agent that did not record it — it holds every
    entry, so nothing is removed under it). ``claims`` are the keys (or
    key prefixes, ``hf/org/repo``) of what it is fetching, before the path is known.
    """

    replica_id: str
    path: str | None = ""
    claims: tuple[str, ...] = ()

    def holds(self, entry: Entry) -> bool:
        if self.path is None:
            return True
        if self.path:
            p = Path(os.path.abspath(self.path))
            top = Path(os.path.abspath(entry.path))
            if p == top or top in p.parents:
                return True
        return any(entry.key == c or entry.key.startswith(f"{c}/") for c in self.claims)


def fetching_use(replica_id: str, model: str, source: str) -> Use:
    """The hold of a shard fetching ``model`` from ``source``: what the fetch writes into.

    A whole repository claims every commit of it: which commit a branch
    names is only known once a mirror or the hub answers.
    """
    try:
        src = ModelSource.parse(source)
    except ValueError:
        return Use(replica_id, "", (model,))
    if src.is_repo:
        return Use(replica_id, "", (f"{HF_DIR}/{src.location}",))
    if src.kind == "file":
        return Use(replica_id, src.location, (model,))
    return Use(replica_id, "", (model,))


@dataclass(frozen=True)
class Limit:
    """How much the cache may hold, and how that was reached."""

    limit_bytes: int
    percent: int
    # The cap in bytes in force (0: none).
    max_bytes: int
    disk_total_bytes: int
    disk_free_bytes: int

    @property
    def capped(self) -> bool:
        """Whether the cap, not the share of the disk, sets the limit."""
        return 0 < self.max_bytes < self.disk_total_bytes * self.percent // 100


def cache_limit(root: Path, percent: int, max_bytes: int) -> Limit:
    """The limit of the cache at ``root``: ``percent`` of its disk, or ``max_bytes`` if lower."""
    probe = Path(root)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # the disk it will be on
    st = os.statvfs(probe)
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    share = total * percent // 100
    limit = min(share, max_bytes) if max_bytes > 0 else share
    return Limit(limit, percent, max_bytes, total, free)


# -- last use -------------------------------------------------------------------------


def read_last_used(root: Path) -> dict[str, int]:
    """key -> unix ms of its last use; {} when never written or unreadable."""
    try:
        data = json.loads((Path(root) / LAST_USED_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int | float)}


def write_last_used(root: Path, used: dict[str, int]) -> None:
    write_atomic(Path(root) / LAST_USED_FILE, json.dumps(used, sort_keys=True, indent=1))


def now_ms() -> int:
    return int(time.time() * 1000)


# -- what the cache holds -------------------------------------------------------------


def _dirs(path: Path) -> list[Path]:
    """The directories right under ``path``, links and dot-names left out."""
    try:
        children = sorted(path.iterdir())
    except OSError:
        return []
    return [c for c in children if not c.name.startswith(".") and c.is_dir() and not c.is_symlink()]


def _files(path: Path) -> Iterator[tuple[Path, int]]:
    """Every file under ``path`` with its size, links not followed."""
    for top, _dirs_here, names in os.walk(path):
        for name in names:
            f = Path(top) / name
            with contextlib.suppress(OSError):
                yield f, f.lstat().st_size


def _mtime_ms(path: Path) -> int:
    try:
        return int(path.stat().st_mtime * 1000)
    except OSError:
        return 0


def _read_source(path: Path) -> str:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    return str(data.get("source", "")) if isinstance(data, dict) else ""


def _model_entry(root: Path, directory: Path, used: dict[str, int]) -> Entry | None:
    files = list(_files(directory))
    names = {f.name for f, _ in files}
    if not names - {LOCAL_MEMO}:
        return None  # nothing here but a local file's memo: no weights of its own
    partial = any(n.endswith(PARTIAL_SUFFIX) for n in names)
    sources = sorted(
        s
        for f, _ in files
        if f.parent == directory
        and f.name.startswith(".")
        and f.name.endswith(".json")
        and f.name != LOCAL_MEMO
        and (s := _read_source(f))
    )
    key = directory.name
    return Entry(
        key=key,
        path=directory,
        source=", ".join(dict.fromkeys(sources)),
        size_bytes=sum(size for _, size in files),
        last_used_unix_ms=used.get(key) or _mtime_ms(directory),
        partial=partial,
    )


def _repo_entry(root: Path, commit_dir: Path, used: dict[str, int]) -> Entry:
    files = list(_files(commit_dir))
    key = commit_dir.relative_to(root).as_posix()
    org, repo = commit_dir.parent.parent.name, commit_dir.parent.name
    return Entry(
        key=key,
        path=commit_dir,
        source=f"hf:{org}/{repo}@{commit_dir.name}",
        size_bytes=sum(size for _, size in files),
        last_used_unix_ms=used.get(key) or _mtime_ms(commit_dir),
        partial=not (commit_dir / COMPLETE_FILE).is_file()
        or any(f.name.endswith(PARTIAL_SUFFIX) for f, _ in files),
    )


def scan(root: Path) -> list[Entry]:
    """Every entry of the cache at ``root``, by key."""
    root = Path(root)
    if not root.is_dir():
        return []
    used = read_last_used(root)
    out: list[Entry] = []
    for child in _dirs(root):
        if child.name == HF_DIR:
            for org in _dirs(child):
                for repo in _dirs(org):
                    out += [_repo_entry(root, c, used) for c in _dirs(repo)]
        elif (entry := _model_entry(root, child, used)) is not None:
            out.append(entry)
    return sorted(out, key=lambda e: e.key)


def match(entries: Iterable[Entry], name: str) -> list[Entry]:
    """The entries ``name`` names: a key, a model name, ``hf/org/repo`` (every commit of
    it) or ``hf:org/repo[@commit]``."""
    if name.startswith("hf:"):
        repo, _, commit = name[3:].partition("@")
        name = f"{HF_DIR}/{repo}" + (f"/{commit}" if commit else "")
    name = name.strip("/")
    return [e for e in entries if e.key == name or e.key.startswith(f"{name}/")]


# -- what goes ------------------------------------------------------------------------


def plan_eviction(
    entries: Iterable[Entry], in_use: set[str], limit_bytes: int
) -> tuple[list[Entry], int]:
    """The entries to remove to bring the cache within ``limit_bytes``, and the total after.

    Unused entries go, the one used longest ago first; an entry in use stays
    whatever it costs, so the total after may still be over the limit.
    """
    entries = list(entries)
    total = sum(e.size_bytes for e in entries)
    out: list[Entry] = []
    for e in sorted(entries, key=lambda e: (e.last_used_unix_ms, e.key)):
        if total <= limit_bytes:
            break
        if e.key in in_use:
            continue
        out.append(e)
        total -= e.size_bytes
    return out, total


def detach(root: Path, entry: Entry) -> Path:
    """Rename ``entry`` out of the cache's view; where it now lies, to ``purge``.

    One rename: the fetcher finds the entry whole or not at all, and a crash
    before ``purge`` leaves a ``.removing-`` directory, deleted at the next start.
    """
    root = Path(root)
    flat = entry.key.replace("/", "-")
    target = root / f"{REMOVING_PREFIX}{flat}-{secrets.token_hex(4)}"
    os.rename(entry.path, target)
    # An emptied hf/<org>/<repo>/ (and hf/<org>/) goes too.
    parent = entry.path.parent
    while parent != root and root in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
    return target


def purge(path: Path) -> None:
    """Delete what ``detach`` set aside (blocking: a model is many gigabytes of files)."""
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        log.warning("could not delete all of %s; it is tried again at the next start", path)


def leftovers(root: Path) -> list[Path]:
    """What removals cut short (a crash, a stop) left behind."""
    try:
        return sorted(p for p in Path(root).iterdir() if p.name.startswith(REMOVING_PREFIX))
    except OSError:
        return []
