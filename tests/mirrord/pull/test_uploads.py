"""Uploads: local files committed as a model revision; wheels and engine archives put whole."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from llmgw.mirror.names import NameRefused
from llmgw.mirror.wire import CommitRequest
from mirrord.pull import DigestMismatch, PullRefused, Uploads, code_of, upload_commit
from mirrord.pull.errors import PullInvalid
from mirrord.store import MirrorStore, QuotaExceeded
from tests.fakes.tiny_repo import make_tiny_repo

TINY = make_tiny_repo()


async def chunks(data: bytes, size: int = 100_000):
    for i in range(0, len(data), size):
        yield data[i : i + size]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wheel(name: str = "demo") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
        z.writestr(f"{name}-1.0.dist-info/METADATA", f"Name: {name}\nVersion: 1.0\n")
        z.writestr(f"{name}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return buf.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> MirrorStore:
    return MirrorStore(tmp_path / "mirror")


async def upload_tiny(up: Uploads, upload_id: str = "up1") -> None:
    for path, data in TINY.files.items():
        await up.put_file(upload_id, path, chunks(data), sha256=sha(data))


async def test_uploaded_files_committed_are_a_revision_named_by_their_digests(store):
    up = Uploads(store)
    await upload_tiny(up)
    rev = await up.commit("up1", CommitRequest(repo="local/tiny"))
    assert rev.refs == ["main"] and rev.source == "upload:up1"
    lines = "".join(f"{p} {sha(TINY.files[p])}\n" for p in sorted(TINY.files))
    assert rev.commit == hashlib.sha1(lines.encode()).hexdigest()
    for path, data in TINY.files.items():
        assert store.file("local/tiny", rev.commit, path)[1].read_bytes() == data
    # The upload is gone once committed: nothing of it waits in incoming/.
    assert up.files("up1") == [] and not (store.incoming_dir / "uploads" / "up1").exists()


async def test_the_same_files_uploaded_twice_make_the_same_commit(tmp_path):
    # Guards: two mirrors given the same upload must agree on its commit without talking.
    a, b = MirrorStore(tmp_path / "a"), MirrorStore(tmp_path / "b")
    await upload_tiny(Uploads(a), "x")
    await upload_tiny(Uploads(b), "y")
    ra = await Uploads(a).commit("x", CommitRequest(repo="local/tiny"))
    rb = await Uploads(b).commit("y", CommitRequest(repo="local/tiny", ref="v1"))
    assert ra.commit == rb.commit == upload_commit(ra.files)


async def test_a_file_sent_again_replaces_the_one_before_and_only_what_came_is_held(store):
    up = Uploads(store)
    await up.put_file("u", "config.json", chunks(b'{"v": 1}'))
    await up.put_file("u", "config.json", chunks(b'{"v": 2}'))
    assert [(f.path, f.sha256) for f in up.files("u")] == [("config.json", sha(b'{"v": 2}'))]


async def test_a_file_whose_bytes_do_not_match_the_digest_given_is_refused_and_not_kept(store):
    up = Uploads(store)
    with pytest.raises(DigestMismatch) as e:
        await up.put_file("u", "model.safetensors", chunks(b"abc"), sha256=sha(b"abd"))
    assert sha(b"abc") in str(e.value) and sha(b"abd") in str(e.value)
    assert up.files("u") == []
    leftovers = [p for p in (store.incoming_dir / "uploads").rglob("*") if p.is_file()]
    assert leftovers == []


async def test_upload_names_that_are_not_plain_are_refused(store):
    up = Uploads(store)
    with pytest.raises(NameRefused):
        await up.put_file("../x", "config.json", chunks(b"{}"))
    with pytest.raises(NameRefused):
        await up.put_file("u", "../../etc/passwd", chunks(b"x"))
    with pytest.raises(NameRefused):
        await up.put_file("u", "sub/.hidden", chunks(b"x"))
    with pytest.raises(NameRefused):
        await up.commit("u", CommitRequest(repo="../x"))


async def test_an_upload_with_pickles_is_refused_at_commit_unless_allowed(store):
    up = Uploads(store)
    await up.put_file("u", "config.json", chunks(b"{}"))
    await up.put_file("u", "pytorch_model.bin", chunks(b"p" * 100))
    with pytest.raises(PullRefused) as e:
        await up.commit("u", CommitRequest(repo="local/old"))
    assert "pytorch_model.bin" in str(e.value) and code_of(e.value) == "refused"
    rev = await up.commit("u", CommitRequest(repo="local/old", allow_pickle=True))
    assert rev.has_pickle and rev.allow_pickle


async def test_an_upload_past_the_quota_is_refused_at_commit_and_kept_to_retry(tmp_path):
    store = MirrorStore(tmp_path / "m", max_bytes=100_000)
    up = Uploads(store)
    await upload_tiny(up)
    with pytest.raises(QuotaExceeded):
        await up.commit("up1", CommitRequest(repo="local/tiny"))
    assert store.revisions() == [] and store.used_bytes() == 0
    assert len(up.files("up1")) == len(TINY.files)


async def test_committing_an_empty_upload_says_to_send_files_first(store):
    with pytest.raises(Exception) as e:
        await Uploads(store).commit("nothing", CommitRequest(repo="local/x"))
    assert code_of(e.value) == "not_found" and "send its files" in e.value.hint


async def test_a_wheel_is_held_by_its_sha256(store):
    data = wheel()
    rev = await Uploads(store).put_artifact("wheel", "demo-1.0-py3-none-any.whl", chunks(data))
    assert (rev.kind, rev.commit, rev.files[0].size) == ("wheel", sha(data), len(data))
    assert store.blob_path(sha(data)).read_bytes() == data


@pytest.mark.parametrize(
    ("name", "data"),
    [("demo-1.0-py3-none-any.whl", b"not a zip"), ("demo.tar.gz", wheel())],
    # Named, not by their bytes: a zip's bytes hold the time it was made, and every
    # worker of a parallel run must collect the same tests.
    ids=["zip-named-whl-not-a-zip", "wheel-named-tar-gz"],
)
async def test_a_file_that_is_not_a_wheel_is_refused_as_one(store, name, data):
    with pytest.raises(PullInvalid):
        await Uploads(store).put_artifact("wheel", name, chunks(data))
    assert store.revisions() == [] and store.used_bytes() == 0


async def test_an_engine_archive_needs_its_sha256_and_is_checked_against_it(store):
    up = Uploads(store)
    data = b"archive" * 1000
    with pytest.raises(PullInvalid):
        await up.put_artifact("engine", "llama.tar.gz", chunks(data))
    with pytest.raises(DigestMismatch):
        await up.put_artifact("engine", "llama.tar.gz", chunks(data), sha256=sha(b"x"))
    rev = await up.put_artifact("engine", "llama.tar.gz", chunks(data), sha256=sha(data))
    assert (rev.kind, rev.repo, rev.commit) == ("engine", "llama.tar.gz", sha(data))
    again = await up.put_artifact("engine", "llama.tar.gz", chunks(data), sha256=sha(data))
    assert again.commit == rev.commit and len(store.revisions("engine")) == 1
