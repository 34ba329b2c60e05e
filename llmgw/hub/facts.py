"""A hub repository's planning facts: config.json and every safetensors shard's header.

Kilobytes per shard, never the weights: the index (model.safetensors.index.json)
names the shards, or the tree's *.safetensors where a repository has one file;
each header is the first 8+N bytes of its shard. llmgw.modelplan.hf_meta.read_hf
turns them into ModelFacts (parameters, dtype, layers, KV heads, experts,
trained context).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from llmgw.hub.client import HubClient, HubEntry
from llmgw.hub.errors import EntryNotFound, HubAnswerInvalid, HubError
from llmgw.modelplan.hf_meta import read_hf
from llmgw.modelplan.types import ModelFacts

INDEX_FILE = "model.safetensors.index.json"
# Headers read at once: a 160-shard model plans in a few round trips.
PARALLEL_READS = 8


async def read_repo_facts(
    hub: HubClient, repo: str, commit: str, files: list[HubEntry] | None = None
) -> ModelFacts:
    """The facts of the model at ``repo``@``commit``, from its config and shard headers."""
    try:
        config = await hub.read_json(repo, commit, "config.json")
    except EntryNotFound as e:
        raise HubError(
            f"{repo} has no config.json: it is not a transformers model repository",
            hint="name one GGUF file of it (hf:org/repo:file.gguf) or a repository with a config",
        ) from e
    if not isinstance(config, Mapping):
        raise HubAnswerInvalid(f"{repo}/config.json is not a JSON object")
    shards = await _shards(hub, repo, commit, files)
    sem = asyncio.Semaphore(PARALLEL_READS)

    async def header(path: str) -> dict:
        async with sem:
            return await hub.safetensors_header(repo, commit, path)

    headers = await asyncio.gather(*(header(s) for s in shards))
    return read_hf(config, headers)


async def _shards(
    hub: HubClient, repo: str, commit: str, files: list[HubEntry] | None
) -> list[str]:
    try:
        index = await hub.read_json(repo, commit, INDEX_FILE)
    except EntryNotFound:
        index = None
    if isinstance(index, Mapping) and isinstance(index.get("weight_map"), Mapping):
        return sorted({str(v) for v in index["weight_map"].values()})
    if files is None:
        files = await hub.list_files(repo, commit)
    found = sorted(f.path for f in files if f.path.endswith(".safetensors") and "/" not in f.path)
    if not found:
        raise HubError(
            f"{repo} holds no safetensors weights",
            hint="models stored only as pickles (.bin) are not served; "
            "pick a repository with safetensors, or a GGUF file of it",
        )
    return found
