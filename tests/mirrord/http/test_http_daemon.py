"""``llmgw mirror serve`` as a real process: tokens read, HTTPS by default, serving, stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import sys

import httpx
import pytest

from llmgw.errors import ConfigError
from llmgw.mirror.config import MirrorServeConfig
from llmgw.paths import Paths
from llmgw.tls import pki
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


def _mirror_home(tmp_path) -> Paths:
    """A machine as ``server init --mirror`` leaves it: a cluster CA, the mirror's
    certificate from it, its read token and its own admin token beside the cluster's."""
    paths = Paths.under(tmp_path / "home")
    paths.secrets_dir.mkdir(parents=True)
    paths.pki_dir.mkdir(parents=True)
    ca = pki.create_ca("test")
    mirror = pki.issue_mirror_cert(ca, ["localhost"])
    paths.ca_cert.write_bytes(ca.cert_pem)
    paths.mirror_cert.write_bytes(mirror.cert_pem)
    paths.mirror_key.write_bytes(mirror.key_pem)
    paths.mirror_read_token_file.write_text("read-me\n")
    paths.mirror_admin_token_file.write_text("admin-me\n")
    paths.admin_token_file.write_text("the-cluster-s-own\n")
    return paths


async def _serve(paths: Paths, *flags: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llmgw", "mirror", "serve", "--listen", "127.0.0.1:0",
        "--upstream", "", *flags,
        env={**os.environ, "LLMGW_HOME": str(paths.home)},
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def _served_at(proc: asyncio.subprocess.Process, scheme: str) -> str:
    assert proc.stderr is not None
    while True:
        line = (await proc.stderr.readline()).decode()
        assert line, "the mirror exited before it served"
        if m := re.search(rf"serving {scheme.upper()} at ({scheme}://\S+)", line):
            return m.group(1)


async def test_llmgw_mirror_serve_serves_https_with_the_cluster_ca_until_sigterm(tmp_path):
    paths = _mirror_home(tmp_path)
    data = tmp_path / "data"
    proc = await _serve(paths, "--data-dir", str(data))
    try:
        url = await _served_at(proc, "https")
        verify = ssl.create_default_context(cafile=str(paths.ca_cert))
        async with httpx.AsyncClient(base_url=url, verify=verify) as c:
            health = await c.get("/health")
            bare = await c.get("/v1/info")
            info = await c.get("/v1/info", headers={"Authorization": "Bearer read-me"})
            du = await c.get("/v1/du", headers={"Authorization": "Bearer admin-me"})
            # The cluster's admin token is no token of the mirror's, and its own reads nothing.
            cluster = await c.get("/v1/du", headers={"Authorization": "Bearer the-cluster-s-own"})
            admin_reads = await c.get("/v1/info", headers={"Authorization": "Bearer admin-me"})
        assert health.json()["ok"] is True
        assert bare.status_code == 401 and info.status_code == 200 and du.status_code == 200
        assert cluster.status_code == 403 and admin_reads.status_code == 403
        # Without the cluster's CA the mirror is not trusted.
        async with httpx.AsyncClient(base_url=url) as untrusting:
            with pytest.raises(httpx.ConnectError):
                await untrusting.get("/health")
        assert data.stat().st_mode & 0o777 == 0o750
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_plain_http_is_served_only_when_asked_for(tmp_path):
    paths = _mirror_home(tmp_path)
    paths.mirror_cert.unlink()
    refused = await _serve(paths, "--data-dir", str(tmp_path / "data"))
    _, err = await refused.communicate()
    said = " ".join(err.decode().split())
    assert refused.returncode == ConfigError.exit_code, said
    assert "serves HTTPS" in said and "llmgw server init --mirror" in said and "plain_http" in said
    proc = await _serve(paths, "--data-dir", str(tmp_path / "data"), "--plain-http")
    try:
        url = await _served_at(proc, "http")
        async with httpx.AsyncClient(base_url=url) as c:
            assert (await c.get("/v1/info")).status_code == 401
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_the_cluster_s_admin_token_is_refused_as_the_mirror_s(tmp_path):
    # Guards: mirrors took the cluster's admin token by default, so every mirror machine
    # held the key to the whole admin API.
    paths = _mirror_home(tmp_path)
    cfg = MirrorServeConfig(admin_token_file=str(paths.admin_token_file))
    with pytest.raises(ConfigError) as e:
        read_tokens(cfg, paths)
    assert "is the cluster's admin token" in e.value.message
    assert "mirror-admin-token" in e.value.hint
    same = MirrorServeConfig(admin_token_file=str(paths.mirror_read_token_file))
    with pytest.raises(ConfigError, match="is its read token"):
        read_tokens(same, paths)
    # By default: the mirror's own.
    assert read_tokens(MirrorServeConfig(), paths)["admin_token"] == "admin-me"
