"""What the mirror holds, on disk as small JSON files and in memory for serving.

    revisions/model/<org>/<name>/<commit>.json   one wire.Revision with its files
    revisions/<kind>/<file>/<sha256>.json        a wheel or an engine archive
    refs/<org>/<name>.json                       {"main": "<commit>", …}
    .removed.json                                [wire.Removal]: tombstones, kept

A manifest is written once (atomically) and never changed; a ref moves when
a later pull names another commit. Everything is loaded at start, so a
resolve or a tree listing never touches the disk for metadata.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from llmgw.fsutil import write_atomic
from llmgw.mirror.names import check_file_name, check_kind, check_repo, check_revision
from llmgw.mirror.wire import Removal, Revision
from mirrord.store.errors import StoreError

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (kind, repo, commit)
REMOVED_FILE = ".removed.json"


def check_holding(kind: str, repo: str, commit: str) -> Key:
    """The key of a holding, every part checked before it becomes a path."""
    check_kind(kind)
    if kind == "model":
        check_repo(repo)
    else:
        check_file_name(repo)
    check_revision(commit)
    return (kind, repo, commit)


class Index:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.rev_dir = self.data_dir / "revisions"
        self.refs_dir = self.data_dir / "refs"
        self.revisions: dict[Key, Revision] = {}
        # repo -> {ref: commit} (models only)
        self.refs: dict[str, dict[str, str]] = {}
        self.removed: dict[Key, float] = {}
        self._load()

    # -- loading -------------------------------------------------------------------

    def _load(self) -> None:
        for path in sorted(self.rev_dir.rglob("*.json")) if self.rev_dir.is_dir() else []:
            try:
                rev = Revision.model_validate_json(path.read_bytes())
                key = check_holding(rev.kind, rev.repo, rev.commit)
            except (OSError, ValueError) as e:
                log.warning("leaving %s aside: it is not a revision manifest (%s)", path, e)
                continue
            if path != self._manifest_path(key):
                log.warning("leaving %s aside: it is not where its revision belongs", path)
                continue
            self.revisions[key] = rev.model_copy(update={"refs": []})
        if self.refs_dir.is_dir():
            for path in self.refs_dir.glob("*/*.json"):
                repo = f"{path.parent.name}/{path.stem}"
                try:
                    check_repo(repo)
                    refs = json.loads(path.read_text())
                except (OSError, ValueError) as e:
                    log.warning("leaving %s aside: %s", path, e)
                    continue
                if isinstance(refs, dict):
                    self.refs[repo] = {str(k): str(v) for k, v in refs.items()}
        removed_path = self.data_dir / REMOVED_FILE
        if removed_path.is_file():
            try:
                for item in json.loads(removed_path.read_text()):
                    r = Removal.model_validate(item)
                    self.removed[(r.kind, r.repo, r.commit)] = r.removed_unix
            except (OSError, ValueError) as e:
                raise StoreError(
                    f"{removed_path} cannot be read: {e}",
                    hint="it lists what was removed, so peers do not copy it back; "
                    "fix or remove the file",
                ) from e

    # -- paths ---------------------------------------------------------------------

    def _manifest_path(self, key: Key) -> Path:
        kind, repo, commit = key
        return self.rev_dir / kind / repo / f"{commit}.json"

    def _refs_path(self, repo: str) -> Path:
        return self.refs_dir / f"{repo}.json"

    # -- changes -------------------------------------------------------------------

    def write_revision(self, rev: Revision) -> None:
        key = check_holding(rev.kind, rev.repo, rev.commit)
        stored = rev.model_copy(update={"refs": []})
        path = self._manifest_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, stored.model_dump_json(indent=1))
        self.revisions[key] = stored

    def drop_revision(self, key: Key) -> Revision | None:
        rev = self.revisions.pop(key, None)
        self._manifest_path(key).unlink(missing_ok=True)
        kind, repo, commit = key
        if kind == "model" and repo in self.refs:
            kept = {r: c for r, c in self.refs[repo].items() if c != commit}
            if kept != self.refs[repo]:
                self._write_refs(repo, kept)
        return rev

    def point_refs(self, repo: str, refs: list[str], commit: str) -> None:
        current = dict(self.refs.get(repo, {}))
        for ref in refs:
            current[check_revision(ref)] = commit
        if current != self.refs.get(repo):
            self._write_refs(repo, current)

    def _write_refs(self, repo: str, refs: dict[str, str]) -> None:
        path = self._refs_path(repo)
        if refs:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(refs, sort_keys=True))
            self.refs[repo] = refs
        else:
            path.unlink(missing_ok=True)
            self.refs.pop(repo, None)

    def tombstone(self, key: Key, removed_unix: float) -> None:
        if self.removed.get(key, 0.0) >= removed_unix:
            return
        self.removed[key] = removed_unix
        items = [
            Removal(kind=k, repo=r, commit=c, removed_unix=t).model_dump(mode="json")
            for (k, r, c), t in sorted(self.removed.items())
        ]
        write_atomic(self.data_dir / REMOVED_FILE, json.dumps(items, indent=1))

    # -- reading -------------------------------------------------------------------

    def with_refs(self, rev: Revision) -> Revision:
        """The revision with the refs that name it now."""
        if rev.kind != "model":
            return rev
        names = sorted(r for r, c in self.refs.get(rev.repo, {}).items() if c == rev.commit)
        return rev.model_copy(update={"refs": names}) if names else rev
