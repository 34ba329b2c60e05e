"""``llmgw node add`` and ``node remove`` end to end, against a real OpenSSH sshd.

The node is a network namespace running Debian's sshd (tests/e2e/netns_host.py);
gatewayd runs on this machine, its agent port on this side of the veth pair.
``node add`` logs in as root with a key, checks the machine, installs llmgw
into a venv under a temporary install root from the warm wheelhouse (the
namespace has no route to PyPI), writes agent.yaml and the certificates,
starts the agent (detached: no systemd runs here) and waits for it to
register. ``node remove`` drains it, stops it and revokes its certificate:
an agent started again with that certificate is refused by gatewayd.

The namespace shares this machine's filesystem: the install root keeps the
test out of /opt and /etc. Everything node add started in the namespace is
killed by the fixture's teardown, whatever the outcome.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from llmgw.onboard.layout import NodeLayout
from llmgw.paths import Paths
from tests.e2e.netns_host import (
    LLMGW,
    NODE_ADD_STEPS,
    HostControlPlane,
    NetnsHost,
    host_control_plane,
    llmgw_env,
    node_host_fixture,  # noqa: F401  (the node_host fixture)
    parse_ndjson,
    run_node_add,
)
from tests.e2e.wheelhouse import warm_wheelhouse  # noqa: F401  (a fixture)

NODE_ID = "netns-node-1"
# Bounds on waits for something that must happen, never timing assertions.
READY_WITHIN_S = 60.0
GONE_WITHIN_S = 60.0
REFUSED_WITHIN_S = 60.0


def wait_until(fn, *, timeout_s: float, interval_s: float = 0.5, what: str = ""):
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what or fn}")
        time.sleep(interval_s)


@pytest.fixture
def plane(node_host: NetnsHost, tmp_path: Path):
    with host_control_plane(node_host, tmp_path) as cp:
        yield cp


def test_the_test_host_reaches_gatewayd_over_tls_with_a_certificate_naming_its_address(
    node_host: NetnsHost, plane: HostControlPlane
):
    # Guards the harness: an agent port bound to 127.0.0.1, or a server
    # certificate without the veth address, would fail every node add with a
    # connection error that says nothing about node add itself.
    host, port = plane.agent_address.rsplit(":", 1)
    probe = textwrap.dedent(
        f"""
        import socket, ssl
        ctx = ssl.create_default_context(cafile={str(plane.home / "etc/pki/ca.crt")!r})
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(({host!r}, {port}), 5) as raw:
            with ctx.wrap_socket(raw, server_hostname={host!r}) as tls:
                print(tls.selected_alpn_protocol())
        """
    )
    res = node_host.exec("python3", "-c", probe)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "h2"


def _refusals(plane: HostControlPlane) -> list[str]:
    """gatewayd's log lines refusing an agent for a revoked certificate."""
    return [
        line
        for line in plane.log_text().splitlines()
        if "refused an agent stream" in line and "revoked" in line
    ]


def _keep_node_identity(layout: NodeLayout, home: Path) -> Paths:
    """Copy the node's agent.yaml and certificate under ``home``; its Paths.

    The agent started again runs from this repo's venv (the namespace shares the
    filesystem), so what ``node remove`` deletes on the node does not matter:
    only gatewayd's refusal of the certificate is tested.
    """
    kept = Paths.under(home)
    kept.pki_dir.mkdir(parents=True)
    pki = {"ca_cert": layout.ca_crt, "cert": layout.node_crt, "key": layout.node_key}
    config = yaml.safe_load(layout.paths.agent_yaml.read_text())
    for key, src in pki.items():
        dst = kept.pki_dir / Path(src).name
        shutil.copy2(src, dst)
        config["pki"][key] = str(dst)
    config["data_dir"] = str(kept.agent_data_dir)
    kept.agent_yaml.write_text(yaml.safe_dump(config, sort_keys=False))
    return kept


@pytest.mark.timeout(600)
def test_node_add_onboards_the_host_and_node_remove_takes_it_out_for_good(
    node_host: NetnsHost,
    plane: HostControlPlane,
    warm_wheelhouse: Path,  # noqa: F811
):
    install_root = node_host.workdir / "node-root"
    add = run_node_add(plane, node_host, NODE_ID, install_root, warm_wheelhouse)
    assert add.returncode == 0, f"node add failed:\n{add.stdout}\n{add.stderr}"
    events = parse_ndjson(add.stdout)

    # Every step reported, in order, each ending well; the last event is the result.
    steps = [e for e in events if e.get("step") != "result"]
    assert list(dict.fromkeys(e["step"] for e in steps)) == list(NODE_ADD_STEPS), add.stdout
    for event in events:
        assert isinstance(event["elapsed_s"], int | float), event
        assert event["status"] != "fail", event
    for step in NODE_ADD_STEPS:
        last = [e for e in steps if e["step"] == step][-1]
        assert last["status"] in ("ok", "warn", "kept"), last
    assert events[-1]["step"] == "result" and events[-1]["status"] == "ok", events[-1]
    assert isinstance(events[-1].get("result"), dict), events[-1]

    # --accept-new-host-key recorded the host's key in the file we named.
    assert node_host.host_key_public.split()[1] in node_host.known_hosts.read_text()
    # Everything under the install root: this shared filesystem's /opt and /etc untouched.
    layout = NodeLayout.for_root(str(install_root))
    assert Path(layout.llmgw).is_file()
    assert layout.paths.agent_yaml.is_file()
    assert Path(layout.pidfile).is_file()  # no systemd here: started detached

    nodes = wait_until(
        lambda: (n := plane.nodes()) and n.get(NODE_ID, {}).get("state") == "ready" and n,
        timeout_s=READY_WITHIN_S,
        what=f"{NODE_ID} ready in ctl nodes",
    )
    assert nodes[NODE_ID]["connected"] is True

    agent_pid = int(Path(layout.pidfile).read_text().split()[0])
    assert agent_pid in node_host.pids()  # node add started it over ssh: it lives in the namespace

    # Again, on the joined node: what is in place is kept, nothing is installed twice,
    # the certificate is not reissued, and the agent running is left running.
    cert = Path(layout.node_crt)
    cert_before = cert.read_bytes()
    again = run_node_add(plane, node_host, NODE_ID, install_root, warm_wheelhouse)
    assert again.returncode == 0, f"node add (again) failed:\n{again.stdout}\n{again.stderr}"
    second = parse_ndjson(again.stdout)
    last_of = {e["step"]: e for e in second if e.get("step") != "result"}
    assert last_of["install"]["status"] == "kept", again.stdout
    assert all(e["status"] != "fail" for e in second), again.stdout
    assert cert.read_bytes() == cert_before
    assert int(Path(layout.pidfile).read_text().split()[0]) == agent_pid
    assert agent_pid in node_host.pids()
    # A copy of the node's certificate, as a machine that was removed could keep one.
    kept_home = node_host.workdir / "kept"
    kept = _keep_node_identity(layout, kept_home)

    remove = plane.llmgw("node", "remove", NODE_ID, "--json", timeout_s=180)
    assert remove.returncode == 0, f"node remove failed:\n{remove.stdout}\n{remove.stderr}"
    removed = parse_ndjson(remove.stdout)
    assert removed[-1]["step"] == "result" and removed[-1]["status"] == "ok", remove.stdout

    wait_until(
        lambda: (n := plane.nodes()) is not None and n.get(NODE_ID, {}).get("state") != "ready",
        timeout_s=GONE_WITHIN_S,
        what=f"{NODE_ID} out of ctl nodes",
    )
    wait_until(
        lambda: agent_pid not in node_host.pids(),
        timeout_s=GONE_WITHIN_S,
        what="node remove to stop the agent",
    )

    # The removed machine's agent, started again with the certificate it kept, is refused.
    log = node_host.workdir / "agent-again.log"
    with log.open("w") as out:
        again = subprocess.Popen(
            ["ip", "netns", "exec", node_host.name, *LLMGW, "agent"]
            + ["--config", str(kept.agent_yaml)],
            env=llmgw_env(kept_home),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(
            lambda: _refusals(plane),
            timeout_s=REFUSED_WITHIN_S,
            what="gatewayd to refuse the revoked certificate",
        )
        nodes = plane.nodes()
        assert nodes is not None
        assert nodes.get(NODE_ID, {}).get("state") != "ready", nodes.get(NODE_ID)
    finally:
        again.terminate()
        try:
            again.wait(timeout=10)
        except subprocess.TimeoutExpired:
            again.kill()
