"""The mirror's store: blobs by digest, revisions written once, refs, tombstones, quota and gc."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from llmgw.mirror.names import NameRefused
from llmgw.mirror.wire import FileEntry, Removal, Revision
from mirrord.store import Incomplete, MirrorStore, NotHeld, QuotaExceeded

COMMIT_A = "a" * 40
COMMIT_B = "b" * 40


def blob(store: MirrorStore, data: bytes) -> FileEntry:
    """Put ``data`` in as a blob the way a pull does: a file in incoming/, adopted by digest."""
    sha = hashlib.sha256(data).hexdigest()
    tmp = store.incoming_dir / f"{sha}.partial"
    tmp.write_bytes(data)
    store.adopt_blob(tmp, sha)
    return FileEntry(path="x", size=len(data), sha256=sha)


def revision(store: MirrorStore, repo: str, commit: str, files: dict[str, bytes]) -> Revision:
    entries = [blob(store, data).model_copy(update={"path": path}) for path, data in files.items()]
    return Revision(repo=repo, commit=commit, files=entries, source="test")


def test_a_revision_is_held_with_its_sizes_and_found_by_commit_ref_or_newest(tmp_path: Path):
    store = MirrorStore(tmp_path)
    rev = store.put(
        revision(store, "org/m", COMMIT_A, {"config.json": b"{}", "m.gguf": b"x" * 100}),
        refs=["main"],
    )
    assert rev.size_bytes == 102 and rev.file_count == 2 and rev.refs == ["main"]
    assert store.resolve("org/m", "main") == COMMIT_A
    assert store.resolve("org/m", COMMIT_A) == COMMIT_A
    assert store.resolve("org/m") == COMMIT_A
    assert store.resolve("org/m", "v9") is None
    entry, path = store.file("org/m", COMMIT_A, "m.gguf")
    assert path.read_bytes() == b"x" * 100 and entry.size == 100


def test_the_store_is_found_again_after_a_restart(tmp_path: Path):
    # Guards against an index that lives only in memory: a restart would serve nothing.
    store = MirrorStore(tmp_path)
    store.put(revision(store, "org/m", COMMIT_A, {"a.bin": b"1"}), refs=["main"])
    again = MirrorStore(tmp_path)
    assert again.mirror_id == store.mirror_id
    assert again.resolve("org/m", "main") == COMMIT_A
    assert again.get("model", "org/m", COMMIT_A).files[0].pickle is True
    assert again.used_bytes() == 1


def test_blobs_are_read_only_and_shared_between_revisions(tmp_path: Path):
    store = MirrorStore(tmp_path)
    store.put(revision(store, "org/m", COMMIT_A, {"w.safetensors": b"same"}))
    store.put(revision(store, "org/n", COMMIT_B, {"w.safetensors": b"same"}))
    assert store.used_bytes() == 4
    path = store.blob_path(hashlib.sha256(b"same").hexdigest())
    assert not stat.S_IMODE(path.stat().st_mode) & 0o222


def test_a_held_revision_is_never_rewritten_but_a_ref_moves(tmp_path: Path):
    store = MirrorStore(tmp_path)
    first = store.put(revision(store, "org/m", COMMIT_A, {"a": b"1"}), refs=["main"])
    again = store.put(revision(store, "org/m", COMMIT_A, {"a": b"1", "b": b"2"}), refs=["v1"])
    assert again.file_count == 1 and again.added_unix == first.added_unix
    assert sorted(again.refs) == ["main", "v1"]
    store.put(revision(store, "org/m", COMMIT_B, {"a": b"3"}), refs=["main"])
    assert store.resolve("org/m", "main") == COMMIT_B
    assert store.get("model", "org/m", COMMIT_A).refs == ["v1"]


def test_a_revision_naming_a_blob_not_held_is_refused(tmp_path: Path):
    store = MirrorStore(tmp_path)
    missing = FileEntry(path="a", size=1, sha256="c" * 64)
    with pytest.raises(Incomplete):
        store.put(Revision(repo="org/m", commit=COMMIT_A, files=[missing]))


@pytest.mark.parametrize("repo", ["..", "org/..", "org/.hidden", "a/b/c", "org/na me", "org\\x/y"])
def test_names_that_would_leave_the_store_are_refused(tmp_path: Path, repo: str):
    # Guards the reference's bug: a model named ".." wrote beside the mirror root.
    store = MirrorStore(tmp_path)
    with pytest.raises(NameRefused):
        store.put(Revision(repo=repo, commit=COMMIT_A, files=[blob(store, b"1")]))


def test_a_removal_drops_refs_collects_unshared_blobs_and_leaves_a_tombstone(tmp_path: Path):
    store = MirrorStore(tmp_path)
    store.put(
        revision(store, "org/m", COMMIT_A, {"a": b"only-here", "b": b"shared"}), refs=["main"]
    )
    store.put(revision(store, "org/n", COMMIT_B, {"b": b"shared"}))
    removed = store.remove("model", "org/m", "main")
    assert [r.commit for r in removed.removed] == [COMMIT_A]
    assert removed.freed_bytes == len(b"only-here")
    assert store.resolve("org/m", "main") is None
    assert store.has_blob(hashlib.sha256(b"shared").hexdigest())
    assert store.removed_at("model", "org/m", COMMIT_A) is not None
    tombstones = json.loads((tmp_path / ".removed.json").read_text())
    assert tombstones[0]["repo"] == "org/m"
    with pytest.raises(NotHeld):
        store.remove("model", "org/m")


def test_a_peers_tombstone_removes_only_what_was_added_before_it(tmp_path: Path):
    store = MirrorStore(tmp_path)
    store.put(revision(store, "org/m", COMMIT_A, {"a": b"1"}), added_unix=100.0)
    store.put(revision(store, "org/n", COMMIT_B, {"a": b"2"}), added_unix=300.0)
    assert store.apply_removal(Removal(repo="org/m", commit=COMMIT_A, removed_unix=200.0))
    # Added again after its removal elsewhere: it stands.
    assert not store.apply_removal(Removal(repo="org/n", commit=COMMIT_B, removed_unix=200.0))
    assert store.get("model", "org/n", COMMIT_B) is not None
    assert {r.repo for r in store.removals()} == {"org/m", "org/n"}


def test_an_add_past_the_quota_is_refused_naming_what_to_remove(tmp_path: Path):
    store = MirrorStore(tmp_path, max_bytes=1000)
    store.put(revision(store, "org/big", COMMIT_A, {"w": b"x" * 900}))
    store.check_room(100)
    with pytest.raises(QuotaExceeded) as e:
        store.check_room(101)
    assert "quota" in e.value.message
    assert f"llmgw ctl mirror rm org/big@{COMMIT_A[:12]}" in e.value.hint


def test_du_counts_unreferenced_blobs_until_collected(tmp_path: Path):
    store = MirrorStore(tmp_path)
    store.put(revision(store, "org/m", COMMIT_A, {"a": b"12345"}))
    blob(store, b"left over")  # a blob a failed add left behind
    du = store.du()
    assert du.used_bytes == 5 + 9 and du.unreferenced_bytes == 9
    assert du.revisions[0].files is None
    assert store.gc() == 9 and store.du().unreferenced_bytes == 0


def test_wheels_and_engine_archives_are_held_by_file_name_and_digest(tmp_path: Path):
    store = MirrorStore(tmp_path)
    entry = blob(store, b"PK wheel").model_copy(update={"path": "pkg-1.0-py3-none-any.whl"})
    rev = store.put(Revision(kind="wheel", repo=entry.path, commit=entry.sha256, files=[entry]))
    assert store.find(entry.path, kind="wheel") == rev
    assert store.resolve(entry.path, entry.sha256, kind="wheel") == entry.sha256
    assert (tmp_path / "revisions" / "wheel" / entry.path / f"{entry.sha256}.json").is_file()
    assert os.path.exists(store.blob_path(entry.sha256))
