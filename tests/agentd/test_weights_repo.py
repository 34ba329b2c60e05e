"""Whole Hugging Face repositories fetched onto a node, file by file, from a fake hub on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentd.weights import (
    ChecksumMismatch,
    DownloadFailed,
    PickleRefused,
    WeightsError,
    WeightsFetcher,
)
from llmgw.catalog.model import Model
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

REPO = make_tiny_repo()
SHARD = REPO.shards[0]


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


def _fetcher(tmp_path, hub, **kw) -> WeightsFetcher:
    kw = {"retries": 0, "retry_backoff_s": 0.0, "progress_every_s": 0.0, **kw}
    return WeightsFetcher(tmp_path / "weights", hf_base_url=hub.url, **kw)


def _same_files(path, files: dict[str, bytes]) -> bool:
    on_disk = {
        str(p.relative_to(path)): p.read_bytes()
        for p in path.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }
    return on_disk == files


async def test_a_repository_is_fetched_whole_into_a_directory_per_commit(tmp_path, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    seen: list[tuple[int, int]] = []
    got = await _fetcher(tmp_path, hub).ensure(
        "tiny", f"hf:org/tiny@{commit}", on_progress=lambda d, t: seen.append((d, t))
    )
    assert got.path == tmp_path / "weights" / "hf" / "org" / "tiny" / commit
    assert got.downloaded and got.size_bytes == sum(len(d) for d in REPO.files.values())
    assert _same_files(got.path, REPO.files)
    # Progress over the whole repository, never going back.
    assert seen[-1] == (got.size_bytes, got.size_bytes)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert {t for _, t in seen} == {got.size_bytes}
    checked = json.loads((got.path / ".llmgw-files.json").read_text())
    assert len(checked[SHARD]["sha256"]) == 64 and checked["config.json"]["git_oid"]


async def test_a_source_without_a_commit_is_fetched_at_the_commit_its_branch_names(tmp_path, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    got = await _fetcher(tmp_path, hub).ensure("tiny", "hf:org/tiny")
    assert got.path.name == commit


async def test_a_corrupted_byte_is_refused_and_the_file_fetched_again(tmp_path, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    hub.corrupt("org/tiny", SHARD, offset=len(REPO.files[SHARD]) // 2)
    got = await _fetcher(tmp_path, hub).ensure("tiny", f"hf:org/tiny@{commit}")
    assert (got.path / SHARD).read_bytes() == REPO.files[SHARD]
    assert len(hub.downloads("org/tiny", SHARD)) == 2
    # The second fetch starts from the first byte: nothing of the bad one is kept.
    assert "range" not in hub.downloads("org/tiny", SHARD)[1].headers


async def test_a_file_that_arrives_damaged_twice_is_refused_in_plain_words(tmp_path, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    hub.corrupt("org/tiny", "tokenizer.json", offset=10, times=2)
    with pytest.raises(ChecksumMismatch, match="has git id .*, not the .* the hub lists") as e:
        await _fetcher(tmp_path, hub).ensure("tiny", f"hf:org/tiny@{commit}")
    assert "mirror" in e.value.hint
    dest = tmp_path / "weights" / "hf" / "org" / "tiny" / commit
    assert not (dest / "tokenizer.json").exists() and not (dest / ".llmgw-complete.json").exists()


async def test_a_cut_download_resumes_where_it_stopped(tmp_path, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    hub.cut("org/tiny", SHARD, after_bytes=100_000)
    fetcher = _fetcher(tmp_path, hub)
    with pytest.raises(DownloadFailed, match="failed"):
        await fetcher.ensure("tiny", f"hf:org/tiny@{commit}")
    got = await fetcher.ensure("tiny", f"hf:org/tiny@{commit}")
    assert _same_files(got.path, REPO.files)
    again = hub.downloads("org/tiny", SHARD)[-1]
    assert again.headers["range"] == "bytes=100000-"
    # Files fetched whole before the cut are not fetched again.
    assert len(hub.downloads("org/tiny", "config.json")) == 1


async def test_one_call_retries_a_cut_and_resumes(tmp_path, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    hub.cut("org/tiny", SHARD, after_bytes=50_000, times=2)
    got = await _fetcher(tmp_path, hub, retries=3).ensure("tiny", f"hf:org/tiny@{commit}")
    assert (got.path / SHARD).read_bytes() == REPO.files[SHARD]
    ranges = [r.headers.get("range") for r in hub.downloads("org/tiny", SHARD)]
    assert ranges == [None, "bytes=50000-", "bytes=100000-"]


async def test_the_pinned_commit_survives_a_branch_moving_upstream(tmp_path, hub):
    first = hub.add_repo("org/tiny", REPO.files)
    model = Model(name="tiny", source="hf:org/tiny", commit=first, profiles=[{"engine": "vllm"}])
    hub.commit("org/tiny", {"config.json": b'{"model_type": "moved"}'})
    got = await _fetcher(tmp_path, hub).ensure_model(model)
    assert got.path.name == first
    assert (got.path / "config.json").read_bytes() == REPO.files["config.json"]


async def test_replicas_share_the_commits_directory_and_a_complete_one_needs_no_hub(tmp_path, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    fetcher = _fetcher(tmp_path, hub)
    a, b = await asyncio.gather(
        fetcher.ensure("tiny", f"hf:org/tiny@{commit}"),
        fetcher.ensure("tiny-long", f"hf:org/tiny@{commit}"),
    )
    assert a.path == b.path and len(hub.downloads("org/tiny", SHARD)) == 1
    await hub.close()  # the hub is gone: the cache answers
    again = await _fetcher(tmp_path, hub).ensure("other", f"hf:org/tiny@{commit}")
    assert again.path == a.path and not again.downloaded


async def test_pickle_files_of_a_repository_are_left_unless_allowed(tmp_path, hub):
    commit = hub.add_repo(
        "org/tiny", {**REPO.files, "pytorch_model.bin": b"pickle", "x.onnx": b"o"}
    )
    got = await _fetcher(tmp_path, hub).ensure("tiny", f"hf:org/tiny@{commit}")
    assert not (got.path / "pytorch_model.bin").exists() and not (got.path / "x.onnx").exists()
    assert hub.downloads("org/tiny", "pytorch_model.bin") == []


async def test_a_repository_of_pickles_only_is_refused(tmp_path, hub):
    files = {"config.json": b"{}", "pytorch_model.bin": b"pickle"}
    commit = hub.add_repo("org/old", files)
    with pytest.raises(PickleRefused, match="only in a pickle format"):
        await _fetcher(tmp_path, hub).ensure("old", f"hf:org/old@{commit}")
    got = await _fetcher(tmp_path, hub).ensure("old", f"hf:org/old@{commit}", allow_pickle=True)
    assert (got.path / "pytorch_model.bin").read_bytes() == b"pickle"


async def test_a_repository_without_config_or_safetensors_is_refused(tmp_path, hub):
    commit = hub.add_repo("org/gguf", {"model.gguf": b"GGUF", "README.md": b"x"})
    with pytest.raises(WeightsError, match="holds no safetensors weights") as e:
        await _fetcher(tmp_path, hub).ensure("g", f"hf:org/gguf@{commit}")
    assert "hf:org/repo:file.gguf" in e.value.hint


async def test_a_mirror_replaces_the_agents_hub(tmp_path, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    fetcher = WeightsFetcher(tmp_path / "w", hf_base_url="http://127.0.0.1:9", retries=0)
    got = await fetcher.ensure("tiny", f"hf:org/tiny@{commit}", mirror_url=hub.url)
    assert _same_files(got.path, REPO.files)
