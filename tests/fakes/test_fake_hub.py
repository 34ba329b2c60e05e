"""The fake hub answers the real huggingface_hub client as the internet's hub does."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from tests.fakes.hub import FakeHub, git_blob_oid
from tests.fakes.tiny_repo import make_tiny_repo

hf = pytest.importorskip("huggingface_hub")


@pytest.fixture
def hf_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    return tmp_path


def _snapshot(hub: FakeHub, repo: str, dest: Path, revision: str | None = None) -> Path:
    return Path(
        hf.snapshot_download(repo, revision=revision, endpoint=hub.url, local_dir=dest, token=False)
    )


async def test_snapshot_download_fetches_the_tiny_repository_whole(hf_env):
    repo = make_tiny_repo()
    async with FakeHub() as hub:
        commit = hub.add_repo("org/tiny", repo.files)
        got = await asyncio.to_thread(_snapshot, hub, "org/tiny", hf_env / "out")
        info = await asyncio.to_thread(
            hf.HfApi(endpoint=hub.url, token=False).model_info, "org/tiny"
        )
    assert info.sha == commit
    for name, data in repo.files.items():
        assert (got / name).read_bytes() == data, name
    # Five or so MB: two shards with real headers.
    assert 4 << 20 < sum(len(d) for d in repo.files.values()) < 8 << 20
    index = json.loads(repo.files["model.safetensors.index.json"])
    assert set(index["weight_map"].values()) == set(repo.shards)


async def test_the_tree_lists_lfs_sha256_and_git_blob_ids(hf_env):
    repo = make_tiny_repo()
    async with FakeHub() as hub:
        hub.add_repo("org/tiny", repo.files)
        api = hf.HfApi(endpoint=hub.url, token=False)
        entries = await asyncio.to_thread(
            lambda: list(api.list_repo_tree("org/tiny", recursive=True))
        )
    by_path = {e.path: e for e in entries}
    shard = by_path[repo.shards[0]]
    assert shard.lfs.sha256 == hashlib.sha256(repo.files[repo.shards[0]]).hexdigest()
    assert shard.size == len(repo.files[repo.shards[0]])
    assert by_path["config.json"].lfs is None
    assert by_path["config.json"].blob_id == git_blob_oid(repo.files["config.json"])


async def test_a_moved_branch_and_a_pinned_commit_give_each_their_own_files(hf_env):
    async with FakeHub() as hub:
        first = hub.add_repo("org/tiny", {"config.json": b'{"v": 1}'})
        hub.commit("org/tiny", {"config.json": b'{"v": 2}'})
        old = await asyncio.to_thread(_snapshot, hub, "org/tiny", hf_env / "a", first)
        new = await asyncio.to_thread(_snapshot, hub, "org/tiny", hf_env / "b")
    assert (old / "config.json").read_bytes() == b'{"v": 1}'
    assert (new / "config.json").read_bytes() == b'{"v": 2}'


async def test_missing_repos_revisions_and_files_carry_the_hubs_error_codes(hf_env):
    from huggingface_hub.errors import (
        EntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    async with FakeHub() as hub:
        hub.add_repo("org/tiny", {"config.json": b"{}"})
        api = hf.HfApi(endpoint=hub.url, token=False)
        with pytest.raises(RepositoryNotFoundError):
            await asyncio.to_thread(api.model_info, "org/nope")
        with pytest.raises(RevisionNotFoundError):
            await asyncio.to_thread(api.model_info, "org/tiny", revision="v9")
        with pytest.raises(EntryNotFoundError):
            await asyncio.to_thread(
                hf.hf_hub_download,
                "org/tiny",
                "nope.json",
                endpoint=hub.url,
                cache_dir=str(hf_env / "c"),
                token=False,
            )


def test_the_hub_runs_in_a_thread_for_code_that_is_not_async(hf_env):
    with FakeHub.in_thread() as hub:
        hub.add_repo("org/tiny", {"config.json": b"{}"})
        got = _snapshot(hub, "org/tiny", hf_env / "out")
    assert (got / "config.json").read_bytes() == b"{}"


async def test_the_real_client_recovers_from_a_download_cut_midway(hf_env):
    # huggingface_hub reads 10 MB chunks: a cut inside the first loses what it
    # held, so it asks again from the start (a resume needs a whole chunk).
    repo = make_tiny_repo()
    shard = repo.shards[0]
    async with FakeHub() as hub:
        hub.add_repo("org/tiny", repo.files)
        hub.cut("org/tiny", shard, after_bytes=100_000)
        got = await asyncio.to_thread(_snapshot, hub, "org/tiny", hf_env / "out")
        ranges = [r.headers.get("range") for r in hub.downloads("org/tiny", shard)]
    assert (got / shard).read_bytes() == repo.files[shard]
    assert len(ranges) == 2
