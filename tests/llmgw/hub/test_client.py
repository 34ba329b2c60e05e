"""The hub client against the fake hub: pinning, listing, header reads, errors in plain words."""

from __future__ import annotations

import hashlib

import pytest

from llmgw.hub import (
    EntryNotFound,
    HubClient,
    HubError,
    HubUnreachable,
    RepoNotFound,
    RevisionNotFound,
)
from llmgw.hub.client import FIRST_READ_BYTES
from llmgw.hub.facts import read_repo_facts
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo, safetensors_bytes


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def test_a_revision_resolves_to_the_commit_its_branch_names_now(hub):
    first = hub.add_repo("org/tiny", {"config.json": b"{}"})
    async with HubClient(hub.url) as client:
        assert await client.resolve("org/tiny") == first
        second = hub.commit("org/tiny", {"README.md": b"moved"})
        assert await client.resolve("org/tiny", "main") == second
        # A commit names itself, and stays resolvable after the branch moved.
        assert await client.resolve("org/tiny", first) == first


async def test_a_commit_lists_its_files_with_sizes_and_lfs_sha256(hub):
    repo = make_tiny_repo()
    commit = hub.add_repo("org/tiny", {**repo.files, "sub/extra.txt": b"x"})
    async with HubClient(hub.url) as client:
        files = {f.path: f for f in await client.list_files("org/tiny", commit)}
    assert set(files) == {*repo.files, "sub/extra.txt"}
    shard = files[repo.shards[1]]
    assert shard.size == len(repo.files[repo.shards[1]])
    assert shard.sha256 == hashlib.sha256(repo.files[repo.shards[1]]).hexdigest()
    assert not files["config.json"].is_lfs


async def test_a_shards_header_is_read_with_range_requests_never_the_weights(hub):
    repo = make_tiny_repo()
    commit = hub.add_repo("org/tiny", repo.files)
    async with HubClient(hub.url) as client:
        facts = await read_repo_facts(client, "org/tiny", commit)
    assert facts.parameters == repo.parameters
    assert facts.weights_bytes == repo.weights_bytes
    assert (facts.layers, facts.kv_heads, facts.attention_heads) == (4, 2, 4)
    assert facts.trained_context == 4096 and facts.quantisation == "BF16"
    downloads = [r for r in hub.requests if "/resolve/" in r.path and r.method == "GET"]
    shard_reads = [r for r in downloads if r.path.endswith(".safetensors")]
    assert shard_reads and all(r.headers["range"].startswith("bytes=0-") for r in shard_reads)
    sent = sum(min(len(repo.files[s]), FIRST_READ_BYTES) for s in repo.shards)
    assert sent < repo.weights_bytes  # headers, not weights


async def test_a_header_longer_than_the_first_read_takes_a_second(hub):
    tensors = {f"t{i:05d}.weight": ("F16", [1], b"\0\0") for i in range(6000)}
    data = safetensors_bytes(tensors)
    commit = hub.add_repo("org/wide", {"model.safetensors": data})
    async with HubClient(hub.url) as client:
        header = await client.safetensors_header("org/wide", commit, "model.safetensors")
    assert len(header) == 6000
    ranges = [r.headers.get("range") for r in hub.requests if r.path.endswith(".safetensors")]
    assert len(ranges) == 2


async def test_missing_repos_revisions_and_files_are_said_plainly(hub):
    hub.add_repo("org/tiny", {"config.json": b"{}"})
    async with HubClient(hub.url) as client:
        with pytest.raises(RepoNotFound, match="org/nope is not a repository on 127.0.0.1"):
            await client.resolve("org/nope")
        with pytest.raises(RevisionNotFound, match="org/tiny has no revision 'v2'"):
            await client.resolve("org/tiny", "v2")
        with pytest.raises(EntryNotFound, match="has no file model.gguf"):
            await client.head("org/tiny", "main", "model.gguf")


async def test_a_hub_that_does_not_answer_is_named_with_where_to_look():
    async with FakeHub() as gone:
        url = gone.url
    async with HubClient(url, retries=0) as client:
        with pytest.raises(HubUnreachable) as e:
            await client.resolve("org/tiny")
    assert "did not answer" in e.value.message and "hub_url" in e.value.hint


@pytest.mark.parametrize("repo", ["org", "org/a/b", "../x", "org/.git", ""])
def test_repository_names_are_one_plain_element_each(repo):
    with pytest.raises(HubError):
        HubClient().file_url(repo, "main", "config.json")
