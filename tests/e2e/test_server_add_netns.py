"""``llmgw server add`` end to end: a real OpenSSH sshd's machine made a second control plane.

The machine is a network namespace running Debian's sshd (tests/e2e/netns_host.py).
PostgreSQL runs on this machine, listening on this side's veth address only
(pg_hba lets the veth's /30 in, nothing else), and is the store of a
gatewayd run here. ``server add`` logs in to the namespace as root with a
key, checks it (the store reachable from there), carries the CA, a server
certificate of its own, every secret and the DSN, writes its server.yaml,
starts gatewayd there (detached: no systemd runs in the namespace) and waits
until the cluster lists it, standing by.

llmgw is placed in the install root beforehand — a launcher for this
checkout's venv, with the marker of the wheel server add would install — so
the install step finds it in place ("kept") and the test stays within a
minute: installing with pip from a wheelhouse is node add's end-to-end test
(tests/e2e/test_node_add_netns.py), with the same install step.

The namespace shares this machine's filesystem: the install root keeps the
test out of /opt and /etc. Everything started in the namespace is killed by
the fixture's teardown, whatever the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from llmgw.onboard.layout import NodeLayout
from llmgw.onboard.wheel import self_wheel
from llmgw.paths import Paths
from tests.e2e.netns_host import (
    LLMGW,
    NetnsHost,
    llmgw_env,
    node_host_fixture,  # noqa: F401  (the node_host fixture)
)
from tests.pg_fixture import PG_USER, _as_postgres, _pg_bin
from tests.ports import free_port as _free_port

STEPS = ["connect", "doctor", "install", "files", "service", "ready"]
# Bounds on waits for something that must happen, never timing assertions.
STARTED_WITHIN_S = 60.0
SERVER_ADD_TIMEOUT_S = 240.0


@dataclass
class VethPostgres:
    """A throwaway PostgreSQL listening on this machine's veth address, and the cluster's DSN."""

    data_dir: Path
    dsn: str


@contextlib.contextmanager
def veth_postgres(host: NetnsHost) -> Iterator[VethPostgres]:
    bin_dir = _pg_bin()
    if bin_dir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is not installed; CI must run server add's end-to-end test")
        pytest.skip("PostgreSQL is not installed")
    # Under /tmp: user postgres must traverse every parent.
    root = Path(tempfile.mkdtemp(prefix="llmgw-pg-veth-", dir="/tmp"))
    root.chmod(0o755)
    data = root / "pg"
    data.mkdir(mode=0o700)
    shutil.chown(data, PG_USER, PG_USER)
    run = {"check": True, "capture_output": True, "text": True, "timeout": 60}
    try:
        subprocess.run(
            _as_postgres([str(bin_dir / "initdb"), "-D", str(data), "-U", PG_USER])
            + ["--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"],
            **run,
        )
        # The veth's /30 only: this machine's side and the namespace's.
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {host.host_address}/30 trust\n")
        with socket.socket() as s:
            s.bind((host.host_address, 0))
            port = s.getsockname()[1]
        options = f"-p {port} -c listen_addresses={host.host_address} -k {data} -c fsync=off"
        subprocess.run(
            _as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(data / "log")])
            + ["-w", "-o", options, "start"],
            **run,
        )
        subprocess.run(
            [str(bin_dir / "psql"), "-X", "-q", "-h", host.host_address, "-p", str(port)]
            + ["-U", PG_USER, "-d", "postgres", "-c", "CREATE DATABASE llmgw"],
            **run,
        )
        yield VethPostgres(data, f"postgresql://{PG_USER}@{host.host_address}:{port}/llmgw")
    finally:
        subprocess.run(
            _as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            check=False,
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Plane:
    home: Path
    log: Path
    proc: subprocess.Popen

    def llmgw(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*LLMGW, *args],
            env=llmgw_env(self.home),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def status(self) -> dict | None:
        res = self.llmgw("ctl", "status", "--json", timeout_s=20)
        return json.loads(res.stdout) if res.returncode == 0 else None


@contextlib.contextmanager
def first_control_plane(host: NetnsHost, pg: VethPostgres, workdir: Path) -> Iterator[Plane]:
    """The cluster's first control plane, on this machine, its store the veth's PostgreSQL."""
    home = workdir / "cp-a"
    ports = []
    for name in ("agent", "admin", "http", "metrics"):
        ports += [f"--{name}-port", str(_free_port())]
    init = subprocess.run(
        [*LLMGW, "server", "init", "--host", host.host_address, "--no-node", "--no-starter"]
        + ["--no-project", *ports],
        env={**llmgw_env(home), "LLMGW_STORE_DSN": pg.dsn},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    log = workdir / "cp-a.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*LLMGW, "server"],
            env=llmgw_env(home),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    plane = Plane(home, log, proc)
    try:
        _wait(
            lambda: (s := plane.status()) is not None and s.get("leader_id") and s,
            what="the first control plane to lead",
            alive=proc,
            log=log,
        )
        yield plane
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait(fn, *, what: str, alive: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + STARTED_WITHIN_S
    while True:
        value = fn()
        if value:
            return value
        if (alive is not None and alive.poll() is not None) or time.monotonic() > deadline:
            text = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(f"gave up waiting for {what}\n{text}")
        time.sleep(0.3)


def _place_llmgw(install_root: Path, cache: Path) -> None:
    """This checkout's llmgw in the install root, as server add's install step would leave it."""
    layout = NodeLayout.for_root(str(install_root))
    wheel = self_wheel(cache)
    launcher = Path(layout.llmgw)
    launcher.parent.mkdir(parents=True)
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} -m llmgw "$@"\n')
    launcher.chmod(0o755)
    Path(layout.wheel_marker).write_text(wheel.sha256 + "\n")


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def _rows(dsn: str, query: str) -> list[dict]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return [dict(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.timeout(400)
def test_server_add_makes_the_host_a_control_plane_standing_by_on_the_shared_store(
    node_host: NetnsHost,
):
    with (
        veth_postgres(node_host) as pg,
        first_control_plane(node_host, pg, node_host.workdir) as plane,
    ):
        install_root = node_host.workdir / "cp-b-root"
        _place_llmgw(install_root, Paths.under(plane.home).server_data_dir / "self-wheels")
        add = subprocess.run(
            [*LLMGW, "server", "add", node_host.node_address, "--accept-new-host-key"]
            + ["--identity", str(node_host.client_key), "--known-hosts", str(node_host.known_hosts)]
            + ["--user", node_host.user, "--install-root", str(install_root), "--json"],
            env=llmgw_env(plane.home),
            capture_output=True,
            text=True,
            timeout=SERVER_ADD_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert add.returncode == 0, f"server add failed:\n{add.stdout}\n{add.stderr}"
        result = json.loads(add.stdout)
        assert result["ok"] is True and result["role"] == "standby", result
        seen = list(dict.fromkeys(e["step"] for e in result["steps"]))
        assert seen == STEPS, result["steps"]
        assert not any(e["status"] == "fail" for e in result["steps"])
        last = {e["step"]: e for e in result["steps"]}
        assert last["install"]["status"] == "kept"
        cp_id = result["control_plane_id"]
        # Found in the cluster's control-plane list, not merely answering /health.
        assert last["ready"]["detail"].startswith(f"{cp_id} stands by (leader: "), last["ready"]

        there = Paths.under(install_root)
        mine = Paths.under(plane.home)
        # The new gatewayd runs in the namespace (server add started it over ssh)...
        pid = int(there.server_pid_file.read_text().split()[0])
        assert pid in node_host.pids()
        # ...and answers from this machine over the veth, standing by.
        cfg = yaml.safe_load(there.server_yaml.read_text())
        http_port = int(cfg["listen"]["http"].rsplit(":", 1)[1])
        base = f"http://{node_host.node_address}:{http_port}"
        assert _get(f"{base}/health") == 200
        assert _get(f"{base}/leader") == 503
        assert _get(f"http://127.0.0.1:{_port(mine, 'http')}/leader") == 200

        # The store's DSN in a 0600 file, never in server.yaml; every secret 0600, the
        # admin token and the CA the cluster's own.
        assert cfg["store"]["dsn_file"] == str(there.secrets_dir / "store-dsn")
        assert (there.secrets_dir / "store-dsn").read_text().strip() == pg.dsn
        for f in there.secrets_dir.iterdir():
            assert _mode(f) == 0o600, f
        assert _mode(there.ca_key) == _mode(there.server_key) == 0o600
        assert there.admin_token_file.read_bytes() == mine.admin_token_file.read_bytes()
        assert there.ca_key.read_bytes() == mine.ca_key.read_bytes()

        # Both write their rows into the one store; the cluster lists the new one standing by.
        rows = asyncio.run(
            _rows(pg.dsn, "SELECT control_plane_id, agent_address FROM control_planes")
        )
        ids = {r["control_plane_id"] for r in rows}
        assert cp_id in ids and len(ids) == 2, rows
        status = plane.status()
        views = {v["control_plane_id"]: v for v in status["control_planes"]}
        assert views[cp_id]["role"] == "standby"
        assert views[status["leader_id"]]["role"] == "leader"
        assert node_host.node_address in views[cp_id]["agent_address"]

        # Its own admin API (on the namespace's loopback) takes the cluster's token and
        # reads the same store.
        own = node_host.exec(*LLMGW, "ctl", "status", "--json", env=llmgw_env(install_root))
        assert own.returncode == 0, own.stderr
        theirs = json.loads(own.stdout)
        assert theirs["store_backend"] == "postgres"
        assert theirs["control_plane_id"] == cp_id and theirs["leader_id"] == status["leader_id"]


def _port(paths: Paths, name: str) -> int:
    cfg = yaml.safe_load(paths.server_yaml.read_text())
    return int(cfg["listen"][name].rsplit(":", 1)[1])
