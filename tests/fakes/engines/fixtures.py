"""Pytest fixtures: the stand-ins on a local index, and one environment built from it.

The index and the wheels are made once a session; so is ``vllm_stand_in_env``
(an environment the real uv built from the vLLM recipe), for tests that only
need to run the stand-in. End-to-end tests let their agent build its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentd.discovery.fake import FakeGpuProbe
from agentd.engine_provider import LocalEngines
from llmgw.engines.recipes import install_message
from llmgw.inventory import Inventory
from tests.fakes.engines.index import LocalIndex
from tests.fakes.engines.stand_ins import StandIns, publish_stand_ins

# A driver new enough for every build the recipes offer (CUDA 12.9 needs R575).
NEW_DRIVER = "580.82.07"


def a100_pair(driver: str = NEW_DRIVER) -> Inventory:
    """The fake 2 x A100 40GB NVLink node, on ``driver``."""
    inventory = FakeGpuProbe.from_fixture("a100_40g_x2_nvlink").inventory()
    inventory.host.nvidia_driver_version = driver
    return inventory


def a100_pair_fixture_file(path: Path, driver: str = NEW_DRIVER) -> Path:
    """The same node as a hardware fixture file an agent can be pointed at."""
    path.write_text(a100_pair(driver).model_dump_json(indent=2))
    return path


def h100_node_fixture_file(path: Path, driver: str = NEW_DRIVER) -> Path:
    """The recorded 8 x H100 NVLink node on ``driver``: cards that run fp8 (8.9 and newer)."""
    inventory = FakeGpuProbe.from_fixture("h100_80g_x8").inventory()
    inventory.host.nvidia_driver_version = driver
    path.write_text(inventory.model_dump_json(indent=2))
    return path


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory) -> Iterator[StandIns]:
    """The vLLM and SGLang stand-ins as wheels, served by a local index for the session."""
    with LocalIndex() as index:
        yield publish_stand_ins(tmp_path_factory.mktemp("stand-in-wheels"), index)


@pytest.fixture(scope="session")
def vllm_stand_in_env(stand_ins, tmp_path_factory) -> Path:
    """The Python of an environment uv built from the vLLM stand-in's recipe."""
    return _build(stand_ins, "vllm", tmp_path_factory.mktemp("vllm-env"))


@pytest.fixture(scope="session")
def sglang_stand_in_env(stand_ins, tmp_path_factory) -> Path:
    return _build(stand_ins, "sglang", tmp_path_factory.mktemp("sglang-env"))


def _build(stand_ins: StandIns, engine: str, engines_dir: Path) -> Path:
    async def build() -> Path:
        engines = LocalEngines(engines_dir)
        engines.manager.inventory = a100_pair()
        await engines.install(install_message(stand_ins.release(engine)))
        python, _env = await engines.ensure(engine, stand_ins.release(engine).version)
        return Path(python)

    # A loop of its own in a thread: the first test to ask may be running in one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, build()).result()
