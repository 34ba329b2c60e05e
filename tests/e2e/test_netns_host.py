"""The namespace test host itself: a real sshd reached over its veth, and gone afterwards."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.e2e.netns_host import (
    NETNS_PREFIX,
    WORKDIR_PREFIX,
    WORKDIR_ROOT,
    NetnsHost,
    NetnsUnavailable,
    namespaces,
    netns_host,
    node_host_fixture,  # noqa: F401  (the node_host fixture)
    sweep_stale_namespaces,
    unavailable_reason,
)


async def test_root_logs_in_with_the_client_key_and_sees_the_namespace_address(
    node_host: NetnsHost,
):
    async with await node_host.connect() as conn:
        addr = await conn.run("ip -o addr", check=True)
        name = await conn.run("hostname", check=True)
    # The shell runs inside the namespace: its own address, and not this machine's others.
    assert f"inet {node_host.node_address}/30" in addr.stdout
    assert node_host.host_address not in addr.stdout
    assert name.stdout.strip() == socket.gethostname()  # the namespace shares the UTS one


async def test_a_password_or_an_unknown_key_is_refused(node_host: NetnsHost):
    import asyncssh

    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        await node_host.connect(client_keys=[stranger], password="root")


def test_the_namespace_reaches_this_machine_over_the_veth(node_host: NetnsHost):
    with socket.create_server((node_host.host_address, 0)) as listener:
        port = listener.getsockname()[1]
        probe = node_host.exec(
            "python3",
            "-c",
            f"import socket; socket.create_connection(('{node_host.host_address}', {port}), 5)",
        )
    assert probe.returncode == 0, probe.stderr


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_teardown_kills_what_runs_inside_and_deletes_the_namespace():
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    try:
        with netns_host() as host:
            # Detached from us, as node add starts an agent where there is no systemd.
            started = host.exec("sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!")
            sleeper = int(started.stdout)
            assert sleeper in host.pids()
            name, veth, workdir = host.name, host.veth_host, host.workdir
    except NetnsUnavailable as e:
        pytest.skip(str(e))
    assert not _alive(sleeper)
    assert name not in namespaces()
    link = subprocess.run(["ip", "link", "show", veth], capture_output=True, check=False)
    assert link.returncode != 0
    assert not workdir.exists()


def test_a_namespace_left_by_a_killed_run_is_swept():
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    # A pid no process has: pid_max is at most 2**22.
    dead_pid = 2**22 + 1
    stale = f"{NETNS_PREFIX}{dead_pid}-0"
    stale_workdir = WORKDIR_ROOT / f"{WORKDIR_PREFIX}{dead_pid}-test"
    (stale_workdir / "node-root").mkdir(parents=True)
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in sweep_stale_namespaces()
        assert stale not in namespaces()
        assert not stale_workdir.exists()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True, check=False)
        shutil.rmtree(stale_workdir, ignore_errors=True)
