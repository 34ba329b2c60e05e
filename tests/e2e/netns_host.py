"""A test host: a network namespace of its own running Debian's OpenSSH sshd.

``llmgw node add`` is tested end to end against a real sshd, as TESTING.md
describes. The host is a network namespace created here (``llmgwt-<pid>-<n>``)
joined to this machine by a veth pair on a private /30 of 10.231.0.0/16: the
namespace's side is the node's address, this machine's side the address the
node dials back (gatewayd's agent port). sshd runs in the namespace with key
authentication only, a host key and an authorized client key made for the
occasion in a temporary folder.

A network namespace shares this machine's filesystem and process table; only
its network is its own. Everything started in it (sshd, what ``node add``
starts over ssh, the agent) is found with ``ip netns pids`` and killed on the
way out, whatever the outcome, and the namespace is deleted (which takes the
veth pair with it). A test session first sweeps namespaces a killed earlier
run left behind: their name carries the pid of the run that made them.

Only the project's own namespaces are ever targets: nothing here dials
anything but the namespace's address.

Skipped with the reason when not root or ``ip``/sshd are missing; under
CI=true a missing sshd or ``ip``, or a kernel that refuses namespaces, is a
failure: a CI that silently skips the onboarding test proves nothing.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest
import yaml

from tests.ports import free_port as _free_port

SSHD = Path("/usr/sbin/sshd")
NETNS_PREFIX = "llmgwt-"
# The private range the test hosts take their /30s from: 16,384 of them.
SUBNET_POOL = ipaddress.IPv4Network("10.231.0.0/16")
SUBNETS = 2 ** (30 - SUBNET_POOL.prefixlen)
# sshd's privilege separation directory; Debian's init script makes it, we do not run that.
PRIVSEP_DIR = Path("/run/sshd")
# sshd starts in well under a second; 20 s is for a loaded 2-core machine.
SSHD_START_TIMEOUT_S = 20.0
# What is left in the namespace gets SIGTERM, then SIGKILL after this long.
KILL_GRACE_S = 5.0
IP_TIMEOUT_S = 30.0
# Keys, sshd_config and the node's install root: /tmp/llmgw-netns-<pid>-XXXX.
WORKDIR_ROOT = Path("/tmp")
WORKDIR_PREFIX = "llmgw-netns-"

_counter = itertools.count()
_NAME_RE = re.compile(rf"^{re.escape(NETNS_PREFIX)}(\d+)-(\d+)$")


class NetnsUnavailable(Exception):
    """This machine cannot run a namespace test host; the message says why."""


@dataclass(frozen=True)
class NetnsHost:
    """A running test host: where it is and how to log in to it."""

    name: str
    """The network namespace's name (``ip netns exec NAME …``)."""
    host_address: str
    """This machine's side of the veth pair: what the node dials back."""
    node_address: str
    """The namespace's side: where sshd listens (port 22)."""
    veth_host: str
    workdir: Path
    client_key: Path
    """The private key ``root`` logs in with (OpenSSH format, 0600)."""
    known_hosts: Path
    """An empty known_hosts file: ``--accept-new-host-key`` fills it."""
    host_key_public: str
    """sshd's host key, ``ssh-ed25519 AAAA…``: what a client should come to trust."""
    sshd_log: Path
    user: str = "root"
    port: int = 22

    def exec(self, *cmd: str, timeout_s: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """Run a command inside the namespace (with this machine's filesystem)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.name, *cmd],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
            **kwargs,
        )

    def pids(self) -> list[int]:
        """Every process in the namespace now."""
        return namespace_pids(self.name)

    async def connect(self, **kwargs) -> asyncssh.SSHClientConnection:
        """An asyncssh connection to the host as root, trusting exactly its host key."""
        options = {
            "username": self.user,
            "client_keys": [str(self.client_key)],
            "known_hosts": asyncssh.import_known_hosts(
                f"{self.node_address} {self.host_key_public}\n"
            ),
            **kwargs,
        }
        return await asyncssh.connect(self.node_address, self.port, **options)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["ip", *args],
        capture_output=True,
        text=True,
        timeout=IP_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check and proc.returncode != 0:
        raise NetnsUnavailable(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def unavailable_reason() -> str | None:
    """Why a test host cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "the namespace test host needs root (ip netns add, sshd)"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed; the namespace test host needs it"
    if not os.access(SSHD, os.X_OK):
        return f"OpenSSH's server is not installed (no {SSHD}); install the openssh-server package"
    return None


def skip_or_fail(reason: str) -> None:
    """Skip the test, or fail it under CI=true, where the onboarding test must run."""
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail(f"{reason}; CI must run node add's end-to-end test")
    pytest.skip(reason)


def namespaces() -> list[str]:
    """The names of this machine's network namespaces."""
    proc = _ip("netns", "list", check=False)
    # Lines read "NAME" or "NAME (id: 3)".
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def namespace_pids(name: str) -> list[int]:
    proc = _ip("netns", "pids", name, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_namespace_processes(name: str, *, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM every process in the namespace, SIGKILL what is left after ``grace_s``."""
    pids = namespace_pids(name)
    if not pids:
        return
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not namespace_pids(name):
            return
        time.sleep(0.1)
    # A process that forked between the two reads is caught by the repeats.
    for _ in range(10):
        pids = namespace_pids(name)
        if not pids:
            return
        _signal_all(pids, signal.SIGKILL)
        time.sleep(0.1)


def delete_namespace(name: str, veth_host: str | None = None) -> None:
    """Kill what runs in the namespace, then delete it and its veth pair."""
    kill_namespace_processes(name)
    if veth_host is not None:
        # Deleting one end deletes the pair; gone already when the namespace went first.
        _ip("link", "del", veth_host, check=False)
    _ip("netns", "del", name, check=False)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_namespaces() -> list[str]:
    """Delete test namespaces whose run is gone (killed before its teardown); their names.

    Their work folders go too: a node's venv in one is a few hundred MB.
    """
    for workdir in WORKDIR_ROOT.glob(f"{WORKDIR_PREFIX}*"):
        pid = workdir.name.removeprefix(WORKDIR_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(workdir, ignore_errors=True)
    swept = []
    for name in namespaces():
        if not name.startswith(NETNS_PREFIX):
            continue
        match = _NAME_RE.match(name)
        # A run still alive (this one, a parallel session) keeps its namespaces.
        if match and _pid_alive(int(match.group(1))):
            continue
        delete_namespace(name)
        swept.append(name)
    return swept


def _subnet(index: int) -> tuple[str, str]:
    """The host and node addresses of the index-th /30 of the pool."""
    base = int(SUBNET_POOL.network_address) + 4 * (index % SUBNETS)
    return str(ipaddress.IPv4Address(base + 1)), str(ipaddress.IPv4Address(base + 2))


def _write_key(path: Path, key: asyncssh.SSHKey) -> None:
    path.write_bytes(key.export_private_key("openssh"))
    path.chmod(0o600)


SSHD_CONFIG = """\
# A throwaway sshd for llmgw's tests, in network namespace {name}.
ListenAddress {address}
Port 22
HostKey {host_key}
PidFile {workdir}/sshd.pid
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The key files sit in a temporary folder, not in a home with strict modes.
StrictModes no
# node add copies the wheel and the wheelhouse; OpenSSH 9's scp speaks SFTP too.
Subsystem sftp internal-sftp
MaxSessions 64
MaxStartups 64:30:128
LogLevel VERBOSE
# The node shares this machine's /etc: its agent (root, as node add starts
# it) must run engines as root rather than make llmgw-engine here for real.
SetEnv LLMGW_ALLOW_ROOT_ENGINES=1
"""


def _start_sshd(host: NetnsHost, config: Path) -> subprocess.Popen:
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    log = host.sshd_log.open("w")
    try:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", host.name, str(SSHD), "-D", "-e", "-f", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    finally:
        log.close()
    deadline = time.monotonic() + SSHD_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise NetnsUnavailable(
                f"sshd exited ({proc.returncode}) in {host.name}:\n"
                + host.sshd_log.read_text(errors="replace")
            )
        try:
            with socket.create_connection((host.node_address, host.port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise NetnsUnavailable(
        f"sshd did not accept connections on {host.node_address}:22 within "
        f"{SSHD_START_TIMEOUT_S} s:\n" + host.sshd_log.read_text(errors="replace")
    )


def _create_namespace() -> tuple[str, str, str, str]:
    """A new namespace wired to this machine: (name, veth_host, host_address, node_address)."""
    name = f"{NETNS_PREFIX}{os.getpid()}-{next(_counter)}"
    if name in namespaces():
        # Left by a killed run that had our pid: the sweep spares live pids.
        delete_namespace(name)
    _ip("netns", "add", name)
    try:
        # The /30 is picked from the pid so parallel runs start far apart; the
        # veth name is made from it, so a taken /30 shows as "File exists" and
        # the next one is tried.
        start = (os.getpid() * 37) % SUBNETS
        for attempt in range(64):
            index = (start + attempt) % SUBNETS
            veth_host, veth_node = f"lgt{index:04x}h", f"lgt{index:04x}n"
            added = _ip(
                "link", "add", veth_host, "type", "veth", "peer", "name", veth_node,
                "netns", name, check=False,
            )  # fmt: skip
            if added.returncode == 0:
                break
            if "exists" not in added.stderr:
                raise NetnsUnavailable(f"could not make a veth pair: {added.stderr.strip()}")
        else:
            raise NetnsUnavailable("no free /30 in 10.231.0.0/16 for a test host")
        host_address, node_address = _subnet(index)
        _ip("addr", "add", f"{host_address}/30", "dev", veth_host)
        _ip("link", "set", veth_host, "up")
        _ip("-n", name, "addr", "add", f"{node_address}/30", "dev", veth_node)
        _ip("-n", name, "link", "set", veth_node, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        return name, veth_host, host_address, node_address
    except BaseException:
        delete_namespace(name)
        raise


@contextlib.contextmanager
def netns_host() -> Iterator[NetnsHost]:
    """A running namespace test host, gone (processes, veth, namespace) after the block.

    Raises NetnsUnavailable when this machine cannot make one.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise NetnsUnavailable(reason)
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-", dir=WORKDIR_ROOT))
    workdir.chmod(0o755)
    name = veth_host = None
    sshd = None
    try:
        name, veth_host, host_address, node_address = _create_namespace()
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        client_key = asyncssh.generate_private_key("ssh-ed25519", comment="llmgw-test-client")
        _write_key(workdir / "ssh_host_ed25519_key", host_key)
        _write_key(workdir / "client_ed25519", client_key)
        (workdir / "client_ed25519.pub").write_bytes(client_key.export_public_key("openssh"))
        authorized = workdir / "authorized_keys"
        authorized.write_bytes(client_key.export_public_key("openssh"))
        known_hosts = workdir / "known_hosts"
        known_hosts.touch(mode=0o600)
        config = workdir / "sshd_config"
        config.write_text(
            SSHD_CONFIG.format(
                name=name,
                address=node_address,
                host_key=workdir / "ssh_host_ed25519_key",
                workdir=workdir,
                authorized_keys=authorized,
            )
        )
        host = NetnsHost(
            name=name,
            host_address=host_address,
            node_address=node_address,
            veth_host=veth_host,
            workdir=workdir,
            client_key=workdir / "client_ed25519",
            known_hosts=known_hosts,
            host_key_public=host_key.export_public_key("openssh").decode().strip(),
            sshd_log=workdir / "sshd.log",
        )
        sshd = _start_sshd(host, config)
        yield host
    finally:
        if sshd is not None and sshd.poll() is None:
            sshd.terminate()
        if name is not None:
            delete_namespace(name, veth_host)
        if sshd is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                sshd.wait(timeout=KILL_GRACE_S)
        shutil.rmtree(workdir, ignore_errors=True)


# The control plane on this machine's side of the veth ---------------------------------------


@dataclass
class HostControlPlane:
    """A gatewayd run as ``llmgw server`` under its own LLMGW_HOME, its agent port on the veth."""

    home: Path
    agent_address: str
    """HOST:PORT on this machine's veth address: what ``--control-plane`` names."""
    log: Path
    proc: subprocess.Popen

    def llmgw(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        """``LLMGW_HOME=home llmgw ARGS``, its output kept."""
        return subprocess.run(
            [*LLMGW, *args],
            env=llmgw_env(self.home),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def nodes(self) -> dict[str, dict] | None:
        """``ctl nodes --json`` by node id, or None when the admin API did not answer."""
        res = self.llmgw("ctl", "nodes", "--json", timeout_s=20)
        if res.returncode != 0:
            return None
        return {n["node_id"]: n for n in json.loads(res.stdout)["nodes"]}

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


LLMGW = [sys.executable, "-m", "llmgw"]
# gatewayd answers its admin API within a few seconds of starting; 60 s is for a busy machine.
GATEWAYD_START_TIMEOUT_S = 60.0


def llmgw_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LLMGW_HOME"] = str(home)
    env.pop("LLMGW_STORE_DSN", None)
    return env


@contextlib.contextmanager
def host_control_plane(host: NetnsHost, workdir: Path) -> Iterator[HostControlPlane]:
    """A running gatewayd the test host can reach, stopped after the block.

    ``server init --host`` puts the veth address in the server certificate (the
    node dials it and checks it); the agent port listens on that address only.
    """
    home = workdir / "home"
    agent_port = _free_port(host.host_address)
    ports = ["--agent-port", str(agent_port)]
    for name in ("admin", "http", "metrics"):
        ports += [f"--{name}-port", str(_free_port("127.0.0.1"))]
    init = subprocess.run(
        [*LLMGW, "server", "init", "--host", host.host_address, "--no-node", "--no-starter"]
        + ["--no-project", *ports],
        env=llmgw_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if init.returncode != 0:
        raise RuntimeError(f"llmgw server init failed ({init.returncode}):\n{init.stderr}")
    server_yaml = home / "etc" / "server.yaml"
    config = yaml.safe_load(server_yaml.read_text())
    config["listen"]["agent"] = f"{host.host_address}:{agent_port}"
    server_yaml.write_text(yaml.safe_dump(config, sort_keys=False))
    log = workdir / "gatewayd.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*LLMGW, "server"],
            env=llmgw_env(home),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    plane = HostControlPlane(home, f"{host.host_address}:{agent_port}", log, proc)
    try:
        deadline = time.monotonic() + GATEWAYD_START_TIMEOUT_S
        while plane.llmgw("ctl", "status", "--json", timeout_s=20).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gatewayd did not start:\n{plane.log_text()}")
            time.sleep(0.3)
        yield plane
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# llmgw node add against the test host --------------------------------------------------------

# The steps node add reports, in order (its NDJSON "step" names).
NODE_ADD_STEPS = ("connect", "doctor", "install", "packages", "user", "join", "register")
# pip installs ~60 wheels into the node's venv; on a loaded 2-core machine that is minutes.
NODE_ADD_TIMEOUT_S = 480.0


def node_add_command(
    plane: HostControlPlane,
    host: NetnsHost,
    node_id: str,
    install_root: Path,
    wheelhouse: Path,
    *extra: str,
) -> list[str]:
    """The ``llmgw node add`` line that onboards the test host, as an operator types it."""
    return [
        *LLMGW, "node", "add", host.node_address,
        "--accept-new-host-key",
        "--identity", str(host.client_key),
        "--known-hosts", str(host.known_hosts),
        "--user", host.user,
        "--node-id", node_id,
        "--control-plane", plane.agent_address,
        "--install-root", str(install_root),
        "--wheelhouse", str(wheelhouse),
        "--json",
        *extra,
    ]  # fmt: skip


def parse_ndjson(text: str) -> list[dict]:
    """One JSON object a line; a line that is not one is an error naming it."""
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"line {number} of the output is not JSON ({e}): {line!r}") from None
    return events


def run_node_add(
    plane: HostControlPlane,
    host: NetnsHost,
    node_id: str,
    install_root: Path,
    wheelhouse: Path,
    *extra: str,
    timeout_s: float = NODE_ADD_TIMEOUT_S,
) -> subprocess.CompletedProcess:
    """Run ``llmgw node add`` on this machine (it reaches the host over ssh), output kept."""
    return subprocess.run(
        node_add_command(plane, host, node_id, install_root, wheelhouse, *extra),
        env=llmgw_env(plane.home),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def step_seconds(events: list[dict]) -> dict[str, float]:
    """Each step's ``elapsed_s`` from its last event, by step name."""
    seconds: dict[str, float] = {}
    for event in events:
        if "step" in event and "elapsed_s" in event:
            seconds[event["step"]] = float(event["elapsed_s"])
    return seconds


@functools.cache
def sweep_once() -> tuple[str, ...]:
    """Once a session (a process): delete the test namespaces a killed earlier run left behind."""
    return tuple(sweep_stale_namespaces())


@pytest.fixture(name="node_host")
def node_host_fixture() -> Iterator[NetnsHost]:
    """A namespace test host running sshd for this test; skipped where one cannot be made.

    Import ``node_host_fixture`` into a test module and ask for ``node_host``.
    """
    reason = unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)
    sweep_once()
    try:
        with netns_host() as host:
            yield host
    except NetnsUnavailable as e:
        skip_or_fail(str(e))
