"""A shard of a whole hf: repository: the node fetches it with progress before the engine is asked."""

from __future__ import annotations

import asyncio

from agentd.shards import ShardRunner
from agentd.weights import WeightsFetcher
from llmgw.errors import LlmgwError
from proto.llmgw.v1 import StartShard, WeightsSource
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

REPO = make_tiny_repo()


class _NoEngine:
    """An engine provider that stops the shard right after its weights are in place."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def ensure(self, engine, version, say=None):
        self.asked.set()
        raise LlmgwError(f"{engine} stops here: the test only fetches")


async def test_a_repository_shard_reports_fetch_progress_then_asks_for_its_engine(tmp_path):
    async with FakeHub() as hub:
        commit = hub.add_repo("org/tiny", REPO.files)
        engines = _NoEngine()
        runner = ShardRunner(
            tmp_path,
            engines,
            fetcher=WeightsFetcher(tmp_path / "weights", hf_base_url="http://127.0.0.1:9"),
        )
        sent = []
        runner.attach(lambda m: sent.append(m.shard_status.to_dict()) if m.shard_status else None)
        runner.start(
            StartShard(
                shard_id="s1",
                replica_id="r1",
                model="tiny",
                engine="vllm",
                gpu_indexes=[0],
                # Where the control plane's StartShard names the pinned commit and a mirror.
                weights=WeightsSource(source=f"hf:org/tiny@{commit}", mirror_url=hub.url),
            )
        )
        await engines.asked.wait()
    total = sum(len(d) for d in REPO.files.values())
    fetching = [s for s in sent if s.get("state") == "fetching" and s.get("fetch")]
    assert fetching, sent
    assert int(fetching[-1]["fetch"]["bytesDone"]) == total
    assert {int(s["fetch"]["bytesTotal"]) for s in fetching} == {total}
    dest = tmp_path / "weights" / "hf" / "org" / "tiny" / commit
    assert (dest / ".llmgw-complete.json").is_file()
    assert (dest / REPO.shards[1]).read_bytes() == REPO.files[REPO.shards[1]]
