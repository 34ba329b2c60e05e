"""A node's weights cache: its entries, their last use, its limit, and what eviction takes.

Real files in a temporary cache laid out as the fetcher lays it out
(``<cache>/<model>/<file>`` with its manifest, ``<cache>/hf/<org>/<repo>/<commit>/``);
the keeper is given the shards' holds as ``ShardRunner.weights_uses`` gives them.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentd.live_settings import BUILT_IN, CLUSTER, ENV, FILE, InForce, LiveSettings
from agentd.weights import cache
from agentd.weights.cache import Entry, Use, fetching_use, plan_eviction
from agentd.weights.keeper import WeightsKeeper
from llmgw.config import AgentConfig
from proto.llmgw.v1 import AgentMessage, AgentSettings

MIB = 2**20
# 2025-03-02 and one day apart: last uses in the past, in a known order.
DAY_MS = 86_400_000
T0_MS = 1_740_873_600_000


def model_entry(root: Path, name: str, size: int, *, used_ms: int = 0, partial: bool = False):
    """``<root>/<name>/model.gguf`` as the fetcher leaves it (or its download under way)."""
    d = root / name
    d.mkdir(parents=True)
    if partial:
        (d / ".model.gguf.partial").write_bytes(b"\0" * size)
        (d / ".model.gguf.partial.json").write_text(json.dumps({"source": f"https://h/{name}"}))
    else:
        (d / "model.gguf").write_bytes(b"\0" * size)
        (d / ".model.gguf.json").write_text(
            json.dumps({"source": f"hf:org/{name}@abc:model.gguf", "size": size})
        )
    if used_ms:
        os.utime(d, (used_ms / 1000, used_ms / 1000))
    return d


def repo_entry(root: Path, repo: str, commit: str, size: int, *, used_ms: int = 0) -> Path:
    d = root / "hf" / repo / commit
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"\0" * size)
    (d / cache.COMPLETE_FILE).write_text("{}")
    if used_ms:
        os.utime(d, (used_ms / 1000, used_ms / 1000))
    return d


def entry_size(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def keys(entries) -> list[str]:
    return [e.key for e in entries]


def entry(key: str, size: int, used_ms: int) -> Entry:
    return Entry(key, Path("/c") / key, "", size, used_ms, False)


# -- what the cache holds ------------------------------------------------------------------


def test_each_model_directory_and_each_repository_commit_is_one_entry_with_its_bytes(tmp_path):
    root = tmp_path / "weights"
    a = model_entry(root, "llama-8b", 3 * MIB)
    r = repo_entry(root, "org/tiny", "c0ffee", 2 * MIB)
    entries = {e.key: e for e in cache.scan(root)}
    assert sorted(entries) == ["hf/org/tiny/c0ffee", "llama-8b"]
    assert entries["llama-8b"].size_bytes == entry_size(a) > 3 * MIB
    assert entries["llama-8b"].source == "hf:org/llama-8b@abc:model.gguf"
    assert entries["hf/org/tiny/c0ffee"].size_bytes == entry_size(r)
    assert entries["hf/org/tiny/c0ffee"].source == "hf:org/tiny@c0ffee"
    assert not any(e.partial for e in entries.values())


def test_a_local_files_memo_the_last_use_file_and_removals_are_no_entries(tmp_path):
    root = tmp_path / "weights"
    (root / "local-model").mkdir(parents=True)
    (root / "local-model" / cache.LOCAL_MEMO).write_text("{}")  # a file: source, used in place
    (root / ".removing-old-1234").mkdir()
    cache.write_last_used(root, {"gone": 1})
    assert cache.scan(root) == []
    assert cache.scan(tmp_path / "never-made") == []


def test_a_download_under_way_counts_its_bytes_and_is_marked_partial(tmp_path):
    root = tmp_path / "weights"
    model_entry(root, "coming", MIB, partial=True)
    d = repo_entry(root, "org/half", "abc", MIB)
    (d / cache.COMPLETE_FILE).unlink()  # not every file fetched yet
    entries = {e.key: e for e in cache.scan(root)}
    assert entries["coming"].partial and entries["coming"].size_bytes >= MIB
    assert entries["coming"].source == "https://h/coming"
    assert entries["hf/org/half/abc"].partial


def test_the_last_use_is_the_one_kept_or_else_the_directorys_time(tmp_path):
    root = tmp_path / "weights"
    model_entry(root, "kept", MIB, used_ms=T0_MS)
    model_entry(root, "told", MIB, used_ms=T0_MS)
    cache.write_last_used(root, {"told": T0_MS + DAY_MS})
    entries = {e.key: e for e in cache.scan(root)}
    assert entries["kept"].last_used_unix_ms == T0_MS
    assert entries["told"].last_used_unix_ms == T0_MS + DAY_MS


def test_a_key_a_model_name_or_a_repository_names_its_entries():
    entries = [entry("m", 1, 0), entry("hf/o/r/c1", 1, 0), entry("hf/o/r/c2", 1, 0)]
    assert keys(cache.match(entries, "m")) == ["m"]
    assert keys(cache.match(entries, "hf/o/r")) == ["hf/o/r/c1", "hf/o/r/c2"]
    assert keys(cache.match(entries, "hf:o/r@c2")) == ["hf/o/r/c2"]
    assert cache.match(entries, "hf/o") == entries[1:]
    assert cache.match(entries, "nope") == []


# -- the limit ------------------------------------------------------------------------------


def test_the_limit_is_a_share_of_the_disk_or_the_cap_where_that_is_lower(tmp_path):
    st = os.statvfs(tmp_path)
    total = st.f_blocks * st.f_frsize
    share = cache.cache_limit(tmp_path / "weights" / "not-yet", 30, 0)
    assert (share.limit_bytes, share.disk_total_bytes) == (total * 30 // 100, total)
    assert not share.capped
    capped = cache.cache_limit(tmp_path, 30, 5 * MIB)
    assert capped.limit_bytes == 5 * MIB and capped.capped
    roomy = cache.cache_limit(tmp_path, 1, total)  # a cap above the share changes nothing
    assert roomy.limit_bytes == total // 100 and not roomy.capped


# -- what eviction takes -------------------------------------------------------------------


def test_eviction_takes_unused_entries_oldest_first_until_within_the_limit():
    entries = [
        entry("newest", 4, T0_MS + 3 * DAY_MS),
        entry("oldest", 4, T0_MS),
        entry("older", 4, T0_MS + DAY_MS),
        entry("old", 4, T0_MS + 2 * DAY_MS),
    ]
    plan, after = plan_eviction(entries, set(), 9)
    assert keys(plan) == ["oldest", "older"] and after == 8
    assert plan_eviction(entries, set(), 16) == ([], 16)


def test_eviction_never_takes_an_entry_in_use_even_left_over_the_limit():
    entries = [entry("used-oldest", 4, T0_MS), entry("unused", 4, T0_MS + DAY_MS)]
    plan, after = plan_eviction(entries, {"used-oldest"}, 3)
    assert keys(plan) == ["unused"] and after == 4  # still over: the rest is in use


def test_a_shard_holds_what_it_runs_on_or_fetches_into():
    model = entry("llama", 1, 0)
    repo = entry("hf/org/tiny/c1", 1, 0)
    runs = Use("r-1", "/c/llama/model.gguf")
    assert runs.holds(model) and not runs.holds(repo)
    fetching = fetching_use("r-2", "tiny", "hf:org/tiny")  # the commit is not known yet
    assert fetching.holds(repo) and not fetching.holds(model)
    assert fetching_use("r-3", "llama", "https://h/x.gguf").holds(model)
    assert fetching_use("r-4", "x", "/c/llama/model.gguf").holds(model)  # a file: in the cache
    assert not Use("r-5", "").holds(model)  # the sim runs on nothing
    # An engine adopted from an agent that kept no weights path: it may run on anything.
    assert Use("r-6", None).holds(model) and Use("r-6", None).holds(repo)


def test_a_removal_renames_first_so_a_crash_leaves_no_entry_that_looks_whole(tmp_path):
    root = tmp_path / "weights"
    repo_entry(root, "org/tiny", "c1", MIB)
    (e,) = cache.scan(root)
    away = cache.detach(root, e)
    # Gone from the cache's view at once, emptied parents with it.
    assert cache.scan(root) == [] and not (root / "hf" / "org").exists()
    assert away.name.startswith(".removing-hf-org-tiny-c1-") and away.is_dir()
    assert cache.leftovers(root) == [away]  # what a crash here would leave
    cache.purge(away)
    assert not away.exists() and cache.leftovers(root) == []


# -- the keeper ------------------------------------------------------------------------------


class Holds:
    """The shards' holds, as ShardRunner.weights_uses answers them; tests change them."""

    def __init__(self) -> None:
        self.uses: list[Use] = []

    def __call__(self) -> list[Use]:
        return list(self.uses)


def keeper_for(root: Path, holds: Holds, cap: int) -> tuple[WeightsKeeper, list[AgentMessage]]:
    sent: list[AgentMessage] = []
    keeper = WeightsKeeper(root, holds)
    keeper.set_limit(100, cap)
    keeper.attach(sent.append)
    return keeper, sent


async def test_past_its_cap_the_cache_loses_the_oldest_unused_and_keeps_those_in_use(tmp_path):
    root = tmp_path / "weights"
    in_use = model_entry(root, "in-use", 2 * MIB, used_ms=T0_MS)  # the oldest of all
    model_entry(root, "oldest-unused", 2 * MIB, used_ms=T0_MS + DAY_MS)
    model_entry(root, "older-unused", 2 * MIB, used_ms=T0_MS + 2 * DAY_MS)
    model_entry(root, "newest-unused", 2 * MIB, used_ms=T0_MS + 3 * DAY_MS)
    holds = Holds()
    holds.uses = [Use("r-7c1f", str(in_use / "model.gguf"))]
    keeper, sent = keeper_for(root, holds, 5 * MIB)

    report = await keeper.settle()

    assert keys(cache.scan(root)) == ["in-use", "newest-unused"]
    assert [e.split(" ")[0] for e in report.evicted] == ["oldest-unused", "older-unused"]
    assert [(e.key, list(e.used_by)) for e in report.entries] == [
        ("in-use", ["r-7c1f"]),
        ("newest-unused", []),
    ]
    assert report.total_bytes <= report.limit_bytes == 5 * MIB
    assert report.limit_percent == 100 and report.limit_max_bytes == 5 * MIB
    assert report.note == ""
    assert [m.weights for m in sent] == [report]
    # The in-use entry's use began at this look: it is the newest now.
    assert cache.read_last_used(root)["in-use"] > T0_MS + 3 * DAY_MS


async def test_when_only_entries_in_use_are_left_over_the_cap_they_stay_and_it_says_so(
    tmp_path, caplog
):
    root = tmp_path / "weights"
    a = model_entry(root, "a", 2 * MIB)
    b = repo_entry(root, "org/b", "c1", 2 * MIB)
    holds = Holds()
    holds.uses = [Use("r-a", str(a / "model.gguf")), Use("r-b", str(b))]
    keeper, _ = keeper_for(root, holds, MIB)
    first = await keeper.settle()
    again = await keeper.settle()
    assert keys(cache.scan(root)) == ["a", "hf/org/b/c1"] and not first.evicted
    assert "what is left is in use (a, hf/org/b/c1), so it stays" in first.note
    assert again.note == first.note
    said = [r for r in caplog.records if "so it stays" in r.getMessage()]
    assert len(said) == 1  # said once, not at every look


async def test_a_download_under_way_is_never_taken_though_it_is_the_oldest(tmp_path):
    root = tmp_path / "weights"
    model_entry(root, "coming", 2 * MIB, used_ms=T0_MS, partial=True)
    model_entry(root, "old", 2 * MIB, used_ms=T0_MS + DAY_MS)
    holds = Holds()
    holds.uses = [fetching_use("r-new", "coming", "https://h/coming.gguf")]
    keeper, _ = keeper_for(root, holds, 3 * MIB)
    await keeper.settle()
    assert keys(cache.scan(root)) == ["coming"]


async def test_an_engine_whose_weights_are_not_known_keeps_the_whole_cache(tmp_path):
    # An engine adopted from an agent that did not record its weights path.
    root = tmp_path / "weights"
    model_entry(root, "a", 2 * MIB)
    model_entry(root, "b", 2 * MIB)
    holds = Holds()
    holds.uses = [Use("r-old", None)]
    keeper, _ = keeper_for(root, holds, MIB)
    report = await keeper.settle()
    assert keys(cache.scan(root)) == ["a", "b"] and report.note


async def test_a_shard_leaving_an_entry_marks_it_used_then(tmp_path):
    root = tmp_path / "weights"
    d = model_entry(root, "m", MIB, used_ms=T0_MS)
    holds = Holds()
    holds.uses = [Use("r-1", str(d / "model.gguf"))]
    keeper, _ = keeper_for(root, holds, 100 * MIB)
    await keeper.settle()
    started = cache.read_last_used(root)["m"]
    holds.uses = []
    report = await keeper.settle()
    left = cache.read_last_used(root)["m"]
    assert left >= started > T0_MS
    assert report.entries[0].last_used_unix_ms == left and not report.entries[0].used_by
    # Nothing changed since: the file is not written again.
    mtime = (root / cache.LAST_USED_FILE).stat().st_mtime_ns
    await keeper.settle()
    assert (root / cache.LAST_USED_FILE).stat().st_mtime_ns == mtime


async def test_a_removal_refuses_entries_in_use_and_removes_the_rest(tmp_path):
    root = tmp_path / "weights"
    used = model_entry(root, "used", MIB)
    model_entry(root, "spare", MIB)
    repo_entry(root, "org/tiny", "c1", MIB)
    holds = Holds()
    holds.uses = [Use("r-9", str(used / "model.gguf"))]
    keeper, _ = keeper_for(root, holds, 0)

    lines = await keeper.remove(["used", "spare", "nothing-here"], unused=False)
    assert lines[0] == "kept nothing-here: not in this node's weights cache"
    assert "kept used: in use by replica r-9" in lines
    assert any(line.startswith("removed spare ") for line in lines)
    await _purged(keeper)
    assert keys(cache.scan(root)) == ["hf/org/tiny/c1", "used"]

    size = entry_size(root / "hf" / "org" / "tiny" / "c1")
    lines = await keeper.remove([], unused=True)
    assert lines == [f"removed hf/org/tiny/c1 {size}"]
    await _purged(keeper)
    assert keys(cache.scan(root)) == ["used"] and cache.leftovers(root) == []


async def _purged(keeper: WeightsKeeper) -> None:
    """Wait for the deletions that follow a removal's answer."""
    await asyncio.gather(*keeper._purges)


async def test_the_keeper_deletes_what_a_removal_cut_short_left_when_it_starts(tmp_path):
    root = tmp_path / "weights"
    model_entry(root, "m", MIB)
    (root / ".removing-old-c0de" / "sub").mkdir(parents=True)
    (root / ".removing-old-c0de" / "sub" / "f").write_bytes(b"x")
    keeper = WeightsKeeper(root, Holds())
    reported: asyncio.Queue[AgentMessage] = asyncio.Queue()
    keeper.attach(reported.put_nowait)
    task = asyncio.create_task(keeper.run())
    try:
        first = await asyncio.wait_for(reported.get(), 10)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert cache.leftovers(root) == [] and keys(cache.scan(root)) == ["m"]
    assert [e.key for e in first.weights.entries] == ["m"]


# -- the limit an agent runs on ----------------------------------------------------------------


def test_the_limit_is_agent_yaml_under_the_cluster_under_the_environment(tmp_path):
    cfg = AgentConfig(node_id="n1", control_planes=["127.0.0.1:7070"], weights_cache_percent=40)
    live = LiveSettings(cfg, {"LLMGW_WEIGHTS_CACHE_MAX_BYTES": "1000"})
    assert live.in_force("weights_cache_percent") == InForce("weights_cache_percent", 40, FILE)
    assert live.in_force("weights_cache_max_bytes").source == ENV
    assert live.take(AgentSettings(weights_cache_percent=30, weights_cache_max_bytes=5)) == (
        True,
        "",
    )
    assert live.in_force("weights_cache_percent") == InForce("weights_cache_percent", 30, CLUSTER)
    assert live.in_force("weights_cache_max_bytes").value == 1000  # the node's operator wins
    assert live.take(AgentSettings(weights_cache_percent=101)) == (
        False,
        "weights_cache_percent 101 is not between 1 and 100",
    )
    agent = SimpleNamespace(
        shards=SimpleNamespace(fetcher=SimpleNamespace(hf_base_url="")),
        weights=WeightsKeeper(tmp_path, Holds()),
    )
    live.apply(agent)
    assert (agent.weights.percent, agent.weights.max_bytes) == (30, 1000)


def test_with_nothing_said_the_cache_may_take_half_its_disk_and_has_no_cap():
    live = LiveSettings(AgentConfig(node_id="n1", control_planes=["127.0.0.1:7070"]), {})
    assert live.in_force("weights_cache_percent") == InForce("weights_cache_percent", 50, BUILT_IN)
    assert live.in_force("weights_cache_max_bytes") == InForce(
        "weights_cache_max_bytes", 0, BUILT_IN
    )
