"""``llmgw mirror serve`` as a real process: tokens read, bound, serving, stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import httpx
import pytest

from llmgw.errors import ConfigError
from llmgw.mirror.config import MirrorServeConfig
from llmgw.paths import Paths
from mirrord.main import read_tokens


def test_a_missing_read_token_refuses_to_start_naming_how_to_make_one(tmp_path):
    paths = Paths.under(tmp_path)
    with pytest.raises(ConfigError) as e:
        read_tokens(MirrorServeConfig(), paths)
    assert "llmgw server init --mirror" in e.value.hint


def test_tokens_come_from_the_files_mirror_yaml_names(tmp_path):
    paths = Paths.under(tmp_path)
    (tmp_path / "read").write_text("r-token\n")
    (tmp_path / "admin").write_text("a-token\n")
    (tmp_path / "peer").write_text("p-token\n")
    cfg = MirrorServeConfig(
        read_token_file=str(tmp_path / "read"),
        admin_token_file=str(tmp_path / "admin"),
        peer_token_file=str(tmp_path / "peer"),
    )
    assert read_tokens(cfg, paths) == {
        "read_token": "r-token",
        "admin_token": "a-token",
        "peer_token": "p-token",
    }


async def test_llmgw_mirror_serve_serves_until_sigterm(tmp_path):
    home = tmp_path / "home"
    paths = Paths.under(home)
    paths.secrets_dir.mkdir(parents=True)
    paths.mirror_read_token_file.write_text("read-me\n")
    paths.admin_token_file.write_text("admin-me\n")
    data = tmp_path / "data"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "llmgw",
        "mirror",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "",
        "--data-dir",
        str(data),
        env={**os.environ, "LLMGW_HOME": str(home)},
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:
        url = ""
        assert proc.stderr is not None
        while not url:
            line = (await proc.stderr.readline()).decode()
            assert line, "the mirror exited before it served"
            if m := re.search(r"serving HTTP at (http://\S+)", line):
                url = m.group(1)
        async with httpx.AsyncClient(base_url=url) as c:
            health = await c.get("/health")
            info = await c.get("/v1/info", headers={"Authorization": "Bearer read-me"})
            du = await c.get("/v1/du", headers={"Authorization": "Bearer admin-me"})
        assert health.json()["ok"] is True
        assert info.status_code == 200 and du.status_code == 200
        assert data.stat().st_mode & 0o777 == 0o750
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
