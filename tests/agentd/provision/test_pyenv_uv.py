"""vLLM and SGLang environments built by the real uv from a local index, as a node builds them.

The stand-ins (tests/fakes/engines/) are wheels named ``vllm`` and ``sglang``
on a PEP 691 index on 127.0.0.1; the recipe pins them by sha256. Nothing here
reaches PyPI: the recipe's index replaces it, and ``--no-config`` keeps any
uv.toml on the machine out of it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from agentd.engine_provider import LocalEngines
from agentd.provision.llamacpp import MANIFEST
from agentd.provision.manager import EngineState
from llmgw.engines.recipes import install_message
from tests.fakes.engines.fixtures import a100_pair
from tests.fakes.engines.index import JSON_TYPE
from tests.fakes.engines.stand_ins import LATE_CORE_VERSION, VERSIONS


def engines_on(tmp_path, driver: str | None = None) -> tuple[LocalEngines, list[EngineState]]:
    states: list[EngineState] = []
    engines = LocalEngines(tmp_path / "engines", report=states.append)
    engines.manager.inventory = a100_pair(driver) if driver else a100_pair()
    return engines, states


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
async def test_the_real_uv_builds_the_stand_in_with_its_hashes_as_the_index_stood_after_release(
    tmp_path, stand_ins, engine
):
    engines, states = engines_on(tmp_path)
    release = stand_ins.release(engine)
    await engines.install(install_message(release))
    python, _env = await engines.ensure(engine, release.version)

    # The best build the node's driver (R580) and A100s (8.0) run of those offered.
    assert f"/{engine}/{VERSIONS[engine]}-cu129/venv/bin/python" in python
    assert [s.state for s in states][-1] == "installed"
    assert states[-1].message == f"{engine} {VERSIONS[engine]}"
    assert "installing" in [s.state for s in states]
    manifest = json.loads(
        (tmp_path / "engines" / engine / f"{VERSIONS[engine]}-cu129" / MANIFEST).read_text()
    )
    assert manifest["source"].startswith("PyPI as of 20")
    # The engine's own package is in its environment, and none of it in ours.
    out = await asyncio.to_thread(
        subprocess.run,
        [python, "-c", f"import {engine}, fake_engine_core; print({engine}.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == VERSIONS[engine]
    with pytest.raises(ImportError):
        __import__("fake_engine_core")
    # uv read the index's JSON pages, which carry the upload times --exclude-newer needs.
    pages = [(p, accept) for p, accept in stand_ins.index.requests if p == f"/simple/{engine}/"]
    assert pages and all(JSON_TYPE in accept for _, accept in pages)


async def test_a_package_uploaded_after_the_cut_off_is_not_installed_whatever_its_hash(
    tmp_path, stand_ins
):
    # A hijacked name or a replaced wheel shows up as a newer upload: with
    # --exclude-newer it is not there, even though the recipe's hash names it.
    engines, states = engines_on(tmp_path)
    late = stand_ins.requirements("vllm", core_version=LATE_CORE_VERSION)
    release = stand_ins.release("vllm", requirements={"cu129": late})
    await engines.install(install_message(release))
    assert states[-1].state == "failed"
    assert "fake-engine-core" in states[-1].message
    assert not (tmp_path / "engines" / "vllm" / "0.11.0-cu129").exists()


async def test_a_wheel_whose_hash_is_not_the_recipes_is_refused_by_uv(tmp_path, stand_ins):
    engines, states = engines_on(tmp_path)
    text = stand_ins.requirements("vllm")
    wrong = text.replace(stand_ins.hashes[stand_ins.wheels["vllm"].name], "0" * 64)
    await engines.install(install_message(stand_ins.release("vllm", requirements={"cu129": wrong})))
    assert states[-1].state == "failed"
    assert "hash" in states[-1].message.lower()


async def test_the_a100_node_on_driver_535_says_its_driver_is_older_than_cuda_12_9_needs(
    tmp_path, stand_ins
):
    # The recorded node runs R535; vLLM 0.11 is published for CUDA 12.9 and 12.8 only.
    engines, states = engines_on(tmp_path, driver="535.129.03")
    await engines.install(install_message(stand_ins.release("vllm")))
    assert states[-1].state == "failed"
    assert "driver 535 is older than what CUDA 12.9 needs" in states[-1].message
    assert "driver 535 is older than what CUDA 12.8 needs" in states[-1].message
    assert "upgrade the NVIDIA driver" in states[-1].hint
