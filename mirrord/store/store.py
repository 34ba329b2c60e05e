"""The mirror's store: what it holds, found, added, removed, counted and collected.

See design: blobs by sha256 (blobs.py), revision manifests, refs and
tombstones (index.py). Every method is quick and synchronous — metadata is in
memory — except gc() on a large store, which callers may run in a thread.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import time
from pathlib import Path

from llmgw.catalog.model import is_pickled
from llmgw.mirror.names import COMMIT_RE, SHA256_RE, check_file_path
from llmgw.mirror.wire import Du, FileEntry, Removal, Removed, Revision, State
from mirrord.store.blobs import BlobStore
from mirrord.store.errors import Incomplete, NotHeld, QuotaExceeded
from mirrord.store.index import Index, Key, check_holding

log = logging.getLogger(__name__)

# Room left on the disk whatever the quota says: a full disk breaks more than the mirror.
DISK_RESERVE_BYTES = 1 << 30


def _gb(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GB"
    return f"{n / (1 << 20):.1f} MB"


class MirrorStore:
    def __init__(self, data_dir: Path, *, max_bytes: int = 0) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.incoming_dir = self.data_dir / "incoming"
        self.incoming_dir.mkdir(exist_ok=True)
        self.mirror_id = self._mirror_id()
        self.blobs = BlobStore(self.data_dir)
        self.index = Index(self.data_dir)
        # Bumped at every change: peers and caches compare it.
        self.generation = 0

    def _mirror_id(self) -> str:
        path = self.data_dir / "mirror-id"
        if path.is_file():
            return path.read_text().strip()
        made = secrets.token_hex(8)
        path.write_text(made + "\n")
        return made

    # -- blobs ----------------------------------------------------------------------

    def blob_path(self, sha256: str) -> Path:
        return self.blobs.path(sha256)

    def has_blob(self, sha256: str) -> bool:
        return self.blobs.has(sha256)

    def adopt_blob(self, tmp: Path, sha256: str) -> Path:
        return self.blobs.adopt(Path(tmp), sha256)

    # -- reading --------------------------------------------------------------------

    def revisions(self, kind: str | None = None) -> list[Revision]:
        """Every held revision (with files and refs), newest first."""
        found = [
            self.index.with_refs(r)
            for (k, _, _), r in self.index.revisions.items()
            if kind is None or k == kind
        ]
        return sorted(found, key=lambda r: (-r.added_unix, r.repo, r.commit))

    def get(self, kind: str, repo: str, commit: str) -> Revision | None:
        rev = self.index.revisions.get((kind, repo, commit))
        return self.index.with_refs(rev) if rev else None

    def repo_revisions(self, repo: str, kind: str = "model") -> list[Revision]:
        return [r for r in self.revisions(kind) if r.repo == repo]

    def resolve(self, repo: str, revision: str = "", kind: str = "model") -> str | None:
        """The commit ``revision`` names here (a commit, a ref; "" is main, else the newest)."""
        if revision and (COMMIT_RE.fullmatch(revision) or SHA256_RE.fullmatch(revision)):
            return revision if (kind, repo, revision) in self.index.revisions else None
        if kind == "model":
            refs = self.index.refs.get(repo, {})
            commit = refs.get(revision or "main")
            if commit and (kind, repo, commit) in self.index.revisions:
                return commit
            if revision:
                return None
        held = self.repo_revisions(repo, kind)
        return held[0].commit if held else None

    def find(self, repo: str, revision: str = "", kind: str = "model") -> Revision | None:
        commit = self.resolve(repo, revision, kind)
        return self.get(kind, repo, commit) if commit else None

    def has_repo(self, repo: str, kind: str = "model") -> bool:
        return any(k == kind and r == repo for k, r, _ in self.index.revisions)

    def file(self, repo: str, commit: str, path: str) -> tuple[FileEntry, Path] | None:
        rev = self.index.revisions.get(("model", repo, commit))
        if rev is None:
            return None
        for f in rev.files or []:
            if f.path == path:
                return f, self.blobs.path(f.sha256)
        return None

    def removed_at(self, kind: str, repo: str, commit: str) -> float | None:
        """When this revision was last removed here, if ever."""
        return self.index.removed.get((kind, repo, commit))

    def removals(self) -> list[Removal]:
        return [
            Removal(kind=k, repo=r, commit=c, removed_unix=t)
            for (k, r, c), t in sorted(self.index.removed.items())
        ]

    def state(self) -> State:
        return State(mirror_id=self.mirror_id, revisions=self.revisions(), removed=self.removals())

    # -- adding ---------------------------------------------------------------------

    def put(
        self,
        rev: Revision,
        *,
        refs: list[str] | tuple[str, ...] = (),
        added_unix: float | None = None,
    ) -> Revision:
        """Hold ``rev``, whose blobs are all held already; point ``refs`` at it.

        A revision held already is never rewritten (its refs may move here).
        ``added_unix`` keeps a peer's time of adding; otherwise now.
        """
        key = check_holding(rev.kind, rev.repo, rev.commit)
        files = list(rev.files or [])
        if not files:
            raise Incomplete(f"{rev.repo}@{rev.commit[:12]} has no files to hold")
        seen: set[str] = set()
        for f in files:
            check_file_path(f.path)
            if f.path in seen:
                raise Incomplete(f"{rev.repo}@{rev.commit[:12]} names {f.path} twice")
            seen.add(f.path)
            if not self.blobs.has(f.sha256):
                raise Incomplete(
                    f"{rev.repo}@{rev.commit[:12]}: {f.path} (sha256 {f.sha256[:12]}…) "
                    "is not in the store yet"
                )
        held = self.index.revisions.get(key)
        if held is None:
            entries = [f.model_copy(update={"pickle": is_pickled(f.path)}) for f in files]
            stored = rev.model_copy(
                update={
                    "files": entries,
                    "size_bytes": sum(f.size for f in entries),
                    "file_count": len(entries),
                    "has_pickle": any(f.pickle for f in entries),
                    "added_unix": added_unix if added_unix is not None else time.time(),
                }
            )
            self.index.write_revision(stored)
            log.info("holding %s %s@%s", rev.kind, rev.repo, rev.commit[:12])
        if rev.kind == "model" and refs:
            self.index.point_refs(rev.repo, list(refs), rev.commit)
        self.generation += 1
        return self.get(*key)  # type: ignore[return-value]

    # -- removing -------------------------------------------------------------------

    def remove(self, kind: str, repo: str, revision: str = "") -> Removed:
        """Remove one revision (a commit or a ref) or, with "", every revision of ``repo``."""
        if revision:
            commit = self.resolve(repo, revision, kind)
            keys: list[Key] = [(kind, repo, commit)] if commit else []
        else:
            keys = [k for k in self.index.revisions if k[0] == kind and k[1] == repo]
        if not keys:
            what = f"{repo}@{revision}" if revision else repo
            raise NotHeld(
                f"the mirror holds no {what}",
                hint="see what it holds with: llmgw ctl mirror list",
            )
        now = time.time()
        removed = []
        for key in keys:
            self.index.tombstone(key, now)
            rev = self.index.drop_revision(key)
            if rev:
                removed.append(rev)
                log.info("removed %s %s@%s", key[0], key[1], key[2][:12])
        freed = self.gc()
        self.generation += 1
        return Removed(
            removed=[r.model_copy(update={"files": None}) for r in removed], freed_bytes=freed
        )

    def apply_removal(self, r: Removal) -> bool:
        """A peer's tombstone: kept here, and the revision removed if it was added before it."""
        key = check_holding(r.kind, r.repo, r.commit)
        self.index.tombstone(key, r.removed_unix)
        rev = self.index.revisions.get(key)
        if rev is None or rev.added_unix >= r.removed_unix:
            return False
        self.index.drop_revision(key)
        self.gc()
        self.generation += 1
        log.info("removed %s %s@%s as a peer did", r.kind, r.repo, r.commit[:12])
        return True

    # -- space ----------------------------------------------------------------------

    def referenced(self) -> set[str]:
        return {f.sha256 for r in self.index.revisions.values() for f in r.files or []}

    def gc(self) -> int:
        """Remove blobs no revision refers to; the bytes freed."""
        keep = self.referenced()
        freed = 0
        for sha, _ in list(self.blobs.scan()):
            if sha not in keep:
                freed += self.blobs.remove(sha)
        if freed:
            log.info("collected %s of blobs no revision refers to", _gb(freed))
        return freed

    def used_bytes(self) -> int:
        return self.blobs.total_bytes

    def free_disk_bytes(self) -> int:
        return shutil.disk_usage(self.data_dir).free

    def du(self) -> Du:
        keep = self.referenced()
        unreferenced = sum(size for sha, size in self.blobs.scan() if sha not in keep)
        revs = sorted(self.revisions(), key=lambda r: (-r.size_bytes, r.repo))
        return Du(
            used_bytes=self.used_bytes(),
            max_bytes=self.max_bytes,
            free_disk_bytes=self.free_disk_bytes(),
            unreferenced_bytes=unreferenced,
            revisions=[r.model_copy(update={"files": None}) for r in revs],
        )

    def check_room(self, new_bytes: int) -> None:
        """Refuse (QuotaExceeded) an add of ``new_bytes`` not held yet that would not fit."""
        if new_bytes <= 0:
            return
        used = self.used_bytes()
        largest = sorted(self.revisions(), key=lambda r: -r.size_bytes)[:3]
        what = ", ".join(
            f"llmgw ctl mirror rm {r.repo}@{r.commit[:12]} ({_gb(r.size_bytes)})" for r in largest
        )
        hint = f"remove something first: {what}" if largest else "raise max_bytes in mirror.yaml"
        if self.max_bytes and used + new_bytes > self.max_bytes:
            raise QuotaExceeded(
                f"adding {_gb(new_bytes)} would take the mirror to {_gb(used + new_bytes)} "
                f"of its {_gb(self.max_bytes)} quota ({_gb(used)} used)",
                hint=hint + (", or raise max_bytes in mirror.yaml" if largest else ""),
            )
        free = self.free_disk_bytes()
        if new_bytes + DISK_RESERVE_BYTES > free:
            raise QuotaExceeded(
                f"adding {_gb(new_bytes)} would leave less than {_gb(DISK_RESERVE_BYTES)} free "
                f"on the mirror's disk ({_gb(free)} free)",
                hint=hint,
            )
