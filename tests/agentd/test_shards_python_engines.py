"""A vLLM shard on a node that is still building vLLM: it waits, saying what the build does.

Real uv, the real stand-in, a real engine process; the uv install is held
at a gate so the shard is seen waiting, then let go.
"""

from __future__ import annotations

import asyncio
import getpass

import pytest

from agentd.engine_provider import LocalEngines
from agentd.provision.manager import EngineManager
from agentd.provision.pyenv import SubprocessRunner
from agentd.shards import ShardRunner
from agentd.weights import WeightsFetcher
from llmgw.engines.recipes import install_message
from proto.llmgw.v1 import ShardStatus, StartShard, StopShard, WeightsSource
from tests.fakes.engines.fixtures import a100_pair
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

GIB = 2**30


class GatedUv(SubprocessRunner):
    """The real uv, with ``uv pip install`` held until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def run(self, argv, *, env=None, timeout_s=None):
        if list(argv[1:3]) == ["pip", "install"]:
            await self.gate.wait()
        return await super().run(argv, env=env, timeout_s=timeout_s)


@pytest.fixture
async def hub():
    async with FakeHub() as hub:
        hub.add_repo("org/tiny", make_tiny_repo().files)
        yield hub


async def test_a_shard_waits_in_installing_with_the_builds_own_words_then_starts_from_it(
    tmp_path, stand_ins, hub
):
    uv = GatedUv()
    manager = EngineManager(tmp_path / "engines", lambda _s: None, runner=uv)
    manager.inventory = a100_pair()
    engines = LocalEngines(tmp_path / "engines", manager=manager)
    fetcher = WeightsFetcher(tmp_path / "agent" / "weights", hf_base_url=hub.url)
    shards = ShardRunner(
        tmp_path / "agent", engines, fetcher=fetcher, engine_user=getpass.getuser()
    )
    reports: list[ShardStatus] = []
    changed = asyncio.Event()

    def on_report(msg) -> None:
        reports.append(msg.shard_status)
        changed.set()

    async def until(predicate) -> ShardStatus:
        while True:
            for status in reports:
                if predicate(status):
                    return status
            changed.clear()
            await changed.wait()

    shards.attach(on_report)
    release = stand_ins.release("vllm")
    # As the agent handles them: InstallEngine first, then the StartShard it came with.
    install = asyncio.create_task(engines.install(install_message(release)))
    shards.start(
        StartShard(
            shard_id="tiny-1",
            replica_id="tiny-1",
            model="tiny",
            engine="vllm",
            engine_version=release.version,
            gpu_indexes=[0, 1],
            tensor_parallel=2,
            per_gpu_bytes=6 * GIB,
            weights=WeightsSource(source=f"hf:org/tiny@{hub.repos['org/tiny'].refs['main']}"),
            engine_key="k-1",
            startup_timeout_s=60,
        )
    )
    try:
        waiting = await until(lambda s: s.state == "installing" and "with uv" in s.reason)
        assert waiting.reason == (
            "vllm 0.11.0: installing: installing vLLM 0.11.0 (cu129) with uv: 2 pinned packages"
        )
        uv.gate.set()
        ready = await until(lambda s: s.state == "ready")
        assert ready.port and ready.pid
        await install
        (state,) = [s for s in manager.states() if s.engine == "vllm"]
        assert (state.state, state.variant) == ("installed", "cu129")
    finally:
        uv.gate.set()
        await shards.stop(StopShard(shard_id="tiny-1", reason="test over", grace_s=5))
        await shards.close()
