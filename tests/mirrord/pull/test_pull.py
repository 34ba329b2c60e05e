"""Pulls from a hub into a real store: pinned, checked, resumed, deduplicated, refused."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from llmgw.hub import RepoNotFound
from llmgw.mirror.wire import FileEntry, PullRequest, Revision
from mirrord.pull import DigestMismatch, PullError, PullJob, PullRefused, code_of
from mirrord.pull.errors import UpstreamFailed
from mirrord.pull.puller import Puller
from mirrord.store import MirrorStore, QuotaExceeded
from tests.fakes.hub import FakeHub, git_blob_oid
from tests.fakes.tiny_repo import make_tiny_repo

TINY = make_tiny_repo()
SHARD1, SHARD2 = TINY.shards


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


@pytest.fixture
def store(tmp_path: Path) -> MirrorStore:
    return MirrorStore(tmp_path / "mirror")


@pytest.fixture
async def puller(store, hub):
    p = Puller(store, upstream=hub.url, backoff_s=0)
    yield p
    await p.aclose()


async def pull(puller: Puller, source: str, **kw):
    job = PullJob("p1", source)
    rev = await puller.pull(PullRequest(source=source, **kw), job)
    return rev, job


def held_bytes(store: MirrorStore, rev, path: str) -> bytes:
    _entry, blob = store.file(rev.repo, rev.commit, path)
    return blob.read_bytes()


async def test_a_branch_is_pinned_to_its_commit_and_every_file_is_held_byte_identical(
    hub, store, puller
):
    commit = hub.add_repo("org/tiny", TINY.files)
    rev, job = await pull(puller, "hf:org/tiny")
    assert rev.commit == commit and rev.refs == ["main"]
    assert sorted(f.path for f in rev.files) == sorted(TINY.files)
    for path, data in TINY.files.items():
        assert held_bytes(store, rev, path) == data
        entry = next(f for f in rev.files if f.path == path)
        assert entry.sha256 == hashlib.sha256(data).hexdigest() and entry.size == len(data)
    # Small files carry the git blob id the hub listed; LFS files are marked so.
    config = next(f for f in rev.files if f.path == "config.json")
    assert config.git_oid == git_blob_oid(TINY.files["config.json"]) and not config.lfs
    assert next(f for f in rev.files if f.path == SHARD1).lfs
    # Every download named the commit, never the branch: a moving main cannot mix commits.
    gets = [r.path for r in hub.requests if "/resolve/" in r.path]
    assert gets and all(f"/resolve/{commit}/" in p for p in gets)
    s = job.snapshot()
    assert (s.files_done, s.files_total) == (len(TINY.files), len(TINY.files))
    assert s.bytes_done == s.bytes_total == sum(len(d) for d in TINY.files.values())
    assert store.find("org/tiny", "main").commit == commit


async def test_a_revision_named_by_its_commit_is_held_without_a_ref(hub, store, puller):
    first = hub.add_repo("org/tiny", {"config.json": b"{}", "m.gguf": b"a" * 3000})
    hub.commit("org/tiny", {"m.gguf": b"b" * 3000})
    rev, _ = await pull(puller, f"hf:org/tiny@{first}")
    assert rev.commit == first and rev.refs == []
    assert held_bytes(store, rev, "m.gguf") == b"a" * 3000


async def test_a_cut_download_resumes_with_a_range_request_from_the_bytes_held(hub, store, puller):
    hub.add_repo("org/tiny", TINY.files)
    hub.cut("org/tiny", SHARD1, after_bytes=100_000)
    rev, _ = await pull(puller, "hf:org/tiny")
    gets = hub.downloads("org/tiny", SHARD1)
    assert len(gets) == 2
    assert "range" not in gets[0].headers
    assert gets[1].headers["range"] == "bytes=100000-"
    assert held_bytes(store, rev, SHARD1) == TINY.files[SHARD1]


async def test_a_pull_that_failed_for_good_leaves_its_partial_and_the_next_add_resumes_it(
    hub, store, puller
):
    # Guards: a failed pull threw away what it had fetched, so a flaky link never finished.
    hub.add_repo("org/tiny", {"config.json": b"{}", SHARD1: TINY.files[SHARD1]})
    hub.cut("org/tiny", SHARD1, after_bytes=1000)
    hub.cut("org/tiny", SHARD1, after_bytes=0, times=3)
    with pytest.raises(UpstreamFailed) as e:
        await pull(puller, "hf:org/tiny")
    assert "4 times in a row" in str(e.value) and "1000 bytes kept" in str(e.value)
    assert store.revisions() == []
    sha = hashlib.sha256(TINY.files[SHARD1]).hexdigest()
    assert puller.downloader.partial_path(sha).stat().st_size == 1000
    before = len(hub.downloads("org/tiny", SHARD1))
    rev, _ = await pull(puller, "hf:org/tiny")
    again = hub.downloads("org/tiny", SHARD1)[before:]
    assert again[0].headers["range"] == "bytes=1000-"
    assert held_bytes(store, rev, SHARD1) == TINY.files[SHARD1]
    assert not puller.downloader.partial_path(sha).exists()


async def test_a_link_cut_again_and_again_goes_on_while_bytes_come_between(hub, store, puller):
    # Guards: a long download over a flaky link failed after 4 cuts though each moved it on.
    hub.add_repo("org/tiny", {SHARD1: TINY.files[SHARD1]})
    hub.cut("org/tiny", SHARD1, after_bytes=100_000, times=6)
    rev, _ = await pull(puller, "hf:org/tiny")
    assert len(hub.downloads("org/tiny", SHARD1)) == 7
    assert held_bytes(store, rev, SHARD1) == TINY.files[SHARD1]


async def test_a_file_corrupted_once_is_fetched_again_and_held_right(hub, store, puller):
    hub.add_repo("org/tiny", TINY.files)
    hub.corrupt("org/tiny", SHARD2, offset=5000)
    rev, _ = await pull(puller, "hf:org/tiny")
    assert len(hub.downloads("org/tiny", SHARD2)) == 2
    assert held_bytes(store, rev, SHARD2) == TINY.files[SHARD2]


async def test_a_file_corrupted_twice_is_refused_naming_both_digests_and_nothing_is_kept(
    hub, store, puller
):
    hub.add_repo("org/tiny", TINY.files)
    hub.corrupt("org/tiny", SHARD2, offset=5000, times=2)
    with pytest.raises(DigestMismatch) as e:
        await pull(puller, "hf:org/tiny")
    want = hashlib.sha256(TINY.files[SHARD2]).hexdigest()
    bad = bytearray(TINY.files[SHARD2])
    bad[5000] ^= 0xFF
    got = hashlib.sha256(bad).hexdigest()
    assert want in str(e.value) and got in str(e.value) and SHARD2 in str(e.value)
    assert code_of(e.value) == "invalid"
    assert store.revisions() == [] and not store.has_blob(want) and not store.has_blob(got)
    assert not puller.downloader.partial_path(want).exists()


async def test_a_small_file_is_checked_against_its_git_blob_id(hub, store, puller):
    hub.add_repo("org/tiny", {"config.json": b'{"a": 1}'})
    hub.corrupt("org/tiny", "config.json", offset=2, times=2)
    with pytest.raises(DigestMismatch) as e:
        await pull(puller, "hf:org/tiny")
    assert git_blob_oid(b'{"a": 1}') in str(e.value) and "git blob id" in str(e.value)


async def test_pickle_files_are_refused_before_any_byte_naming_the_file_and_the_way_out(
    hub, store, puller
):
    hub.add_repo("org/old", {"config.json": b"{}", "pytorch_model.bin": b"p" * 2000})
    with pytest.raises(PullRefused) as e:
        await pull(puller, "hf:org/old")
    assert "pytorch_model.bin" in str(e.value) and code_of(e.value) == "refused"
    assert "--include '*.safetensors'" in e.value.hint
    assert not [r for r in hub.requests if "/resolve/" in r.path]


async def test_pickle_files_are_held_when_the_add_allows_them(hub, store, puller):
    hub.add_repo("org/old", {"config.json": b"{}", "pytorch_model.bin": b"p" * 2000})
    rev, _ = await pull(puller, "hf:org/old", allow_pickle=True)
    assert rev.has_pickle and rev.allow_pickle
    assert next(f for f in rev.files if f.path == "pytorch_model.bin").pickle


async def test_include_globs_keep_the_matching_weights_and_always_the_config_and_card(
    hub, store, puller
):
    hub.add_repo(
        "org/gguf",
        {
            "README.md": b"# card",
            "config.json": b"{}",
            "sub/model-Q4_K_M.gguf": b"4" * 4000,
            "model-Q8_0.gguf": b"8" * 8000,
            "pytorch_model.bin": b"p" * 100,
        },
    )
    rev, job = await pull(puller, "hf:org/gguf", include=["*Q4_K_M*"])
    assert sorted(f.path for f in rev.files) == [
        "README.md",
        "config.json",
        "sub/model-Q4_K_M.gguf",
    ]
    assert not hub.downloads("org/gguf", "model-Q8_0.gguf")
    assert job.snapshot().bytes_total == 4000 + len(b"# card") + 2


async def test_a_source_naming_one_file_pulls_that_file_and_the_config(hub, store, puller):
    hub.add_repo("org/gguf", {"config.json": b"{}", "a.gguf": b"a" * 100, "b.gguf": b"b" * 100})
    rev, _ = await pull(puller, "hf:org/gguf:b.gguf")
    assert sorted(f.path for f in rev.files) == ["b.gguf", "config.json"]


async def test_git_housekeeping_files_are_left_out(hub, store, puller):
    # Guards: .gitattributes is in nearly every hub repository and no held file may be dotted.
    hub.add_repo("org/tiny", {".gitattributes": b"*.gguf filter=lfs", "m.gguf": b"m" * 100})
    rev, _ = await pull(puller, "hf:org/tiny")
    assert [f.path for f in rev.files] == ["m.gguf"]


async def test_an_add_past_the_quota_is_refused_before_any_byte_is_fetched(hub, tmp_path):
    store = MirrorStore(tmp_path / "m", max_bytes=1_000_000)
    hub.add_repo("org/tiny", TINY.files)
    p = Puller(store, upstream=hub.url, backoff_s=0)
    try:
        with pytest.raises(QuotaExceeded) as e:
            await pull(p, "hf:org/tiny")
    finally:
        await p.aclose()
    assert code_of(e.value) == "quota"
    assert not [r for r in hub.requests if "/resolve/" in r.path]
    assert list(store.incoming_dir.iterdir()) == []


async def test_a_second_repository_with_the_same_files_fetches_nothing(hub, store, puller):
    hub.add_repo("org/tiny", TINY.files)
    hub.add_repo("other/copy", TINY.files)
    first, _ = await pull(puller, "hf:org/tiny")
    used = store.used_bytes()
    second, job = await pull(puller, "hf:other/copy")
    assert not [r for r in hub.requests if r.path.startswith("/other/copy/resolve/")]
    assert store.used_bytes() == used
    assert {f.sha256 for f in second.files} == {f.sha256 for f in first.files}
    assert job.snapshot().bytes_done == job.snapshot().bytes_total


async def test_pulling_a_held_revision_again_fetches_nothing_and_moves_the_ref(hub, store, puller):
    old = hub.add_repo("org/tiny", {"config.json": b"{}"})
    hub.set_ref("org/tiny", "v1", old)
    await pull(puller, "hf:org/tiny")
    gets = len([r for r in hub.requests if "/resolve/" in r.path])
    rev, _ = await pull(puller, "hf:org/tiny@v1")
    assert len([r for r in hub.requests if "/resolve/" in r.path]) == gets
    assert sorted(rev.refs) == ["main", "v1"]


async def test_a_held_revision_asked_for_with_more_files_is_refused_with_the_way_out(
    hub, store, puller
):
    hub.add_repo("org/gguf", {"config.json": b"{}", "a.gguf": b"a", "b.gguf": b"b"})
    await pull(puller, "hf:org/gguf", include=["a.gguf"])
    with pytest.raises(PullError) as e:
        await pull(puller, "hf:org/gguf", include=["b.gguf"])
    assert code_of(e.value) == "conflict" and "b.gguf" in str(e.value)
    assert "llmgw ctl mirror rm org/gguf@" in e.value.hint


async def test_an_unknown_repository_is_not_found_on_the_upstream(hub, store, puller):
    with pytest.raises(RepoNotFound) as e:
        await pull(puller, "hf:org/nothing")
    assert code_of(e.value) == "not_found"


async def test_a_mirror_without_an_upstream_says_how_to_add_instead(store):
    p = Puller(store, upstream="")
    try:
        with pytest.raises(UpstreamFailed) as e:
            await pull(p, "hf:org/tiny")
    finally:
        await p.aclose()
    assert "upload" in e.value.hint


@pytest.mark.parametrize(
    "source",
    ["hf:org/../x", "hf:.org/x", "hf:org/x@", "org/x", "hf:org", "hf:org/x@../../main"],
)
async def test_sources_that_are_not_plain_names_are_refused(store, source):
    p = Puller(store, upstream="http://127.0.0.1:9")
    try:
        with pytest.raises(Exception) as e:
            await pull(p, source)
    finally:
        await p.aclose()
    assert code_of(e.value) == "invalid"


async def test_a_pull_from_another_hub_sends_its_token(hub, store):
    hub.add_repo("org/tiny", {"config.json": b"{}", "m.gguf": b"m" * 100})
    p = Puller(store, upstream="http://127.0.0.1:9")
    try:
        job = PullJob("p", "hf:org/tiny")
        req = PullRequest(source="hf:org/tiny", upstream=hub.url, upstream_token="peer-token")
        await p.pull(req, job)
    finally:
        await p.aclose()
    assert hub.requests and all(
        r.headers.get("authorization") == "Bearer peer-token" for r in hub.requests
    )
    assert (
        json.loads(store.file("org/tiny", job.snapshot().commit, "config.json")[1].read_text())
        == {}
    )


async def test_two_adds_that_each_fit_but_not_together_are_not_both_let_fetch(hub, tmp_path):
    # Guards: both asked the quota before either had put a byte, and together passed it.
    store = MirrorStore(tmp_path / "m", max_bytes=8_000_000)
    hub.add_repo("org/a", {"a.gguf": b"a" * 5_000_000})
    hub.add_repo("org/b", {"b.gguf": b"b" * 5_000_000})
    p = Puller(store, upstream=hub.url, backoff_s=0)
    try:
        results = await asyncio.gather(
            pull(p, "hf:org/a"), pull(p, "hf:org/b"), return_exceptions=True
        )
    finally:
        await p.aclose()
    refused = [r for r in results if isinstance(r, QuotaExceeded)]
    assert len(refused) == 1 and len(store.revisions()) == 1
    assert store.used_bytes() == 5_000_000


async def test_two_pulls_sharing_a_file_fetch_it_once(hub, store, puller):
    hub.add_repo("org/a", {"config.json": b"{}", SHARD1: TINY.files[SHARD1]})
    hub.add_repo("org/b", {"config.json": b"{}", SHARD1: TINY.files[SHARD1]})
    a, b = await asyncio.gather(pull(puller, "hf:org/a"), pull(puller, "hf:org/b"))
    fetched = hub.downloads("org/a", SHARD1) + hub.downloads("org/b", SHARD1)
    assert len(fetched) == 1
    assert held_bytes(store, b[0], SHARD1) == held_bytes(store, a[0], SHARD1)


async def test_a_peers_wheel_is_fetched_by_its_digest_and_keeps_its_time_of_adding(
    hub, store, puller
):
    data = b"PK wheel bytes" * 100
    digest = hashlib.sha256(data).hexdigest()
    hub.add_repo("peer/blobs", {digest: data}, lfs={digest})
    url = f"{hub.url}/peer/blobs/resolve/main/{digest}"
    name = "demo-1.0-py3-none-any.whl"
    rev = Revision(
        kind="wheel",
        repo=name,
        commit=digest,
        files=[FileEntry(path=name, size=len(data), sha256=digest)],
        added_unix=1234.5,
    )
    held = await puller.pull_artifact(rev, url, added_unix=1234.5)
    assert (held.kind, held.commit, held.added_unix) == ("wheel", digest, 1234.5)
    assert store.blob_path(digest).read_bytes() == data
