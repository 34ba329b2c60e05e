"""``node add`` against an in-process asyncssh node: each failure path, and the words the operator sees.

The node's commands are played by tests/llmgw/onboard/fake_node.py; the SSH
login, SFTP, the probe, the checks and the step logic are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from llmgw.onboard import AddPlan, SshTarget, add_node
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from tests.llmgw.onboard.fake_node import (
    FLAGS_NO_AVX2,
    Scenario,
    start_fake_node,
    stop_fake_node,
)

GIB = 1024**3


@contextlib.asynccontextmanager
async def listening():
    """A TCP port on 127.0.0.1 standing in for the control plane's agent port."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def cp_paths(tmp_path) -> Paths:
    paths = Paths.under(tmp_path / "cp")
    init_server(paths, hosts=["localhost"])
    return paths


async def run_add(tmp_path, cp_paths, scenario, *, control_plane="", known=True, **target):
    node = await start_fake_node(tmp_path, scenario, known=known)
    opts = {
        "host": "127.0.0.1",
        "port": node.port,
        "user": "root",
        "identity": str(node.client_key_file),
        "known_hosts": str(node.known_hosts_file),
    }
    opts.update(target)
    plan = AddPlan(
        target=SshTarget(**opts),
        paths=cp_paths,
        node_id="gpu-a-01",
        control_planes=[control_plane or closed_port()],
        install_root=str(tmp_path / "root"),
        lock_retry_s=0.05,
        register_timeout_s=2,
    )
    try:
        events = [ev async for ev in add_node(plan)]
    finally:
        await stop_fake_node(node)
    return events, node


def failed(events):
    return next(ev for ev in events if ev.status == "fail" and not ev.item)


def by_step(events, step):
    return [ev for ev in events if ev.step == step]


async def test_a_wrong_key_is_refused_with_how_to_install_the_right_one(tmp_path, cp_paths):
    from asyncssh import generate_private_key

    wrong = tmp_path / "wrong_key"
    generate_private_key("ssh-ed25519").write_private_key(str(wrong))
    events, _ = await run_add(tmp_path, cp_paths, Scenario(), identity=str(wrong))
    fail = failed(events)
    assert fail.step == "connect"
    assert fail.detail == f"127.0.0.1 refused to let root log in with the key {wrong}"
    assert "ssh-copy-id" in fail.fix and "--identity" in fail.fix
    assert events[-1].step == "result" and events[-1].result["exit_code"] == 6


async def test_an_unknown_host_key_is_refused_unless_accepted_then_recorded(tmp_path, cp_paths):
    events, _ = await run_add(tmp_path, cp_paths, Scenario(), known=False)
    fail = failed(events)
    assert fail.step == "connect" and "host key of 127.0.0.1 is unknown" in fail.detail
    assert "--accept-new-host-key" in fail.fix

    async with listening() as cp:
        events, node = await run_add(
            tmp_path / "again",
            cp_paths,
            Scenario(),
            known=False,
            accept_new_host_key=True,
            control_plane=cp,
        )
    connected = [ev for ev in by_step(events, "connect") if ev.status == "ok"]
    assert "recorded its new host key SHA256:" in connected[0].detail
    assert f"[127.0.0.1]:{node.port} ssh-ed25519 " in node.known_hosts_file.read_text()


async def test_a_user_without_passwordless_sudo_is_told_what_to_configure(tmp_path, cp_paths):
    events, _ = await run_add(tmp_path, cp_paths, Scenario(uid=1000, sudo_ok=False), user="ops")
    fail = failed(events)
    assert fail.step == "connect"
    assert fail.detail.startswith(
        "ops on 127.0.0.1 is not root and cannot use sudo without a password"
    )
    assert "NOPASSWD" in fail.fix and "--user root" in fail.fix


async def test_an_unsupported_os_family_stops_at_the_doctor(tmp_path, cp_paths):
    alpine = 'ID=alpine\nVERSION_ID=3.20.0\nPRETTY_NAME="Alpine Linux v3.20"\n'
    async with listening() as cp:
        events, node = await run_add(
            tmp_path, cp_paths, Scenario(os_release=alpine), control_plane=cp
        )
    check = next(ev for ev in events if ev.item == "package manager")
    assert check.status == "fail"
    assert "unsupported OS family: Alpine Linux v3.20 (ID='alpine', ID_LIKE='')" in check.detail
    assert "Debian, Ubuntu, RHEL" in check.fix
    assert failed(events).step == "doctor"
    # Nothing was installed on a machine that failed its checks.
    assert not any("pip" in c or "apt-get" in c for c in node.commands)


async def test_a_held_apt_lock_is_waited_for_then_the_packages_install(tmp_path, cp_paths):
    async with listening() as cp:
        events, node = await run_add(
            tmp_path, cp_paths, Scenario(apt_lock_failures=2), control_plane=cp
        )
    packages = by_step(events, "packages")
    waiting = [ev for ev in packages if ev.status == "waiting"]
    assert waiting and waiting[0].detail.startswith("waiting for another apt-get to finish")
    assert not any(ev.status == "fail" for ev in packages)
    assert packages[-1].status == "ok" and packages[-1].detail == "installed libgomp1 with apt-get"
    assert "libgomp1" in node.scenario.installed
    # The environment reaches apt-get through env, never a secret: only the frontend.
    assert any("env DEBIAN_FRONTEND=noninteractive apt-get install" in c for c in node.commands)


async def test_a_cpu_without_avx2_is_a_warning_with_the_vm_fix_and_onboarding_goes_on(
    tmp_path, cp_paths
):
    async with listening() as cp:
        events, _ = await run_add(
            tmp_path, cp_paths, Scenario(cpu_flags=FLAGS_NO_AVX2), control_plane=cp
        )
    cpu = next(ev for ev in events if ev.item == "cpu")
    assert cpu.status == "warn" and cpu.detail.startswith("no AVX2")
    assert "host-passthrough" in cpu.fix and "QEMU" in cpu.fix
    # It went past the doctor: llmgw was installed and the node joined.
    assert by_step(events, "install")[-1].status == "ok"
    assert any(ev.step == "join" for ev in events)
    warnings = events[-1].result["warnings"]
    assert any(w["check"] == "cpu" for w in warnings)


async def test_an_unreachable_control_plane_address_is_named_with_its_port(tmp_path, cp_paths):
    addr = closed_port()
    events, _ = await run_add(tmp_path, cp_paths, Scenario(), control_plane=addr)
    check = next(ev for ev in events if ev.item == "control plane")
    assert check.status == "fail"
    assert check.detail.startswith(f"the node cannot reach the control plane at {addr} (")
    port = addr.rsplit(":", 1)[1]
    assert f"open TCP port {port} on 127.0.0.1" in check.fix
    assert failed(events).step == "doctor"


async def test_a_disk_too_small_stops_with_the_fix(tmp_path, cp_paths):
    async with listening() as cp:
        events, _ = await run_add(
            tmp_path,
            cp_paths,
            Scenario(probe_patch={"disk_free_bytes": 2 * GIB}),
            control_plane=cp,
        )
    disk = next(ev for ev in events if ev.item == "disk")
    assert disk.status == "fail" and "2.0 GiB free" in disk.detail and "needs 5 GiB" in disk.detail
    assert "free space on that disk" in disk.fix
    assert failed(events).step == "doctor"
    assert events[-1].result["exit_code"] == 1


async def test_the_node_gets_its_certificate_agent_yaml_and_a_detached_agent(tmp_path, cp_paths):
    async with listening() as cp:
        events, node = await run_add(tmp_path, cp_paths, Scenario(), control_plane=cp)
    root = tmp_path / "root"
    pki = root / "etc" / "pki"
    assert (pki / "node.key").stat().st_mode & 0o777 == 0o600
    assert (pki / "node.crt").read_bytes() == (
        cp_paths.node_certs_dir / "gpu-a-01" / "node.crt"
    ).read_bytes()
    yaml_text = (root / "etc" / "agent.yaml").read_text()
    assert "gpu-a-01" in yaml_text and cp in yaml_text
    join = by_step(events, "join")
    assert any("no systemd on this machine" in ev.detail for ev in join)
    # The key travelled over SFTP, never on a command line.
    key = (pki / "node.key").read_text()
    assert not any(key.splitlines()[1] in c for c in node.commands)
    # Register fails here (no gatewayd runs): the operator is told why.
    assert failed(events).step == "register"
    names = [ev.step for ev in events]
    assert names.index("connect") < names.index("doctor") < names.index("install")
    assert names.index("install") < names.index("packages") < names.index("join")
    assert all(ev.elapsed_s >= 0 for ev in events)
