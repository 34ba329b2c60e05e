"""A fake node for onboarding tests: a real asyncssh server on 127.0.0.1 whose commands a scenario plays.

The SSH login, SFTP and everything on the control plane's side are real; only
the remote machine is played. The uploaded probe runs for real, reading its
os-release and /proc from a scenario's folder (LLMGW_PROBE_ROOT); file commands
(cat, test, sha256sum, install, rm, chmod) run for real on paths under the
test's tmp dir; package managers, pip, venv, systemctl, users (getent,
useradd, adduser) and the agent's start are played, and recorded. Anything
else answers 127, so a new remote command shows up in a test instead of
running on this machine.

With ``Scenario(real_agent=True)`` the detached agent start (no systemd) is
not played: a real agent runs, with this venv's python (``python -m llmgw
agent --config …`` and LLMGW_HOME as the command sets it), on the agent.yaml
and certificates onboarding wrote, so the node registers with a real
gatewayd. ``stop_fake_node`` stops those agents.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

REAL = {"cat", "test", "sha256sum", "install", "rm", "chmod", "find"}
DEBIAN = 'ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n'
FLAGS_AVX2 = "fpu sse4_2 avx avx2 fma f16c"
FLAGS_NO_AVX2 = "fpu sse4_2"
APT_LOCK = (
    "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)\n"
    "E: Unable to lock directory /var/lib/apt/lists/\n"
)


@dataclass
class Scenario:
    uid: int = 0
    sudo_ok: bool = True
    os_release: str = DEBIAN
    cpu_flags: str = FLAGS_AVX2
    # Fields of the probe's JSON replaced (what this machine cannot fake: free disk, …).
    probe_patch: dict = field(default_factory=dict)
    apt_lock_failures: int = 0
    installed: set[str] = field(default_factory=set)
    # Start a real agent where the node would start one detached (see the module's doc).
    real_agent: bool = False
    # Users the node has beyond root; getent reads them, useradd/adduser add to them (played).
    users: dict[str, int] = field(default_factory=dict)


# The detached start join.py sends (`setsid LLMGW agent --config YAML <… >>LOG … > PIDFILE`).
DETACHED_START = re.compile(
    r"setsid (?P<llmgw>\S+) agent --config (?P<config>\S+) </dev/null >>(?P<log>\S+) 2>&1 "
    r"& echo \$! > (?P<pidfile>\S+);"
)


@dataclass
class FakeNode:
    root: Path
    scenario: Scenario
    port: int = 0
    client_key_file: Path = Path()
    known_hosts_file: Path = Path()
    host_key: asyncssh.SSHKey | None = None
    commands: list[str] = field(default_factory=list)
    server: asyncssh.SSHAcceptor | None = None
    # Real agents started for the node (Scenario.real_agent), stopped by stop_fake_node.
    agents: list[subprocess.Popen] = field(default_factory=list)

    @property
    def sysroot(self) -> Path:
        return self.root / "sysroot"

    def write_sysroot(self) -> None:
        s = self.scenario
        (self.sysroot / "etc").mkdir(parents=True, exist_ok=True)
        (self.sysroot / "proc").mkdir(parents=True, exist_ok=True)
        (self.sysroot / "etc" / "os-release").write_text(s.os_release)
        (self.sysroot / "proc" / "cpuinfo").write_text(
            f"processor\t: 0\nflags\t\t: {s.cpu_flags}\n"
        )
        (self.sysroot / "proc" / "meminfo").write_text("MemTotal:       16384000 kB\n")

    async def handle(self, process: asyncssh.SSHServerProcess) -> None:
        command = process.command or ""
        self.commands.append(command)
        out, err, code = await self.play(shlex.split(command))
        process.stdout.write(out)
        process.stderr.write(err)
        process.exit(code)

    async def play(self, argv: list[str]) -> tuple[str, str, int]:
        s = self.scenario
        if argv[:3] == ["sudo", "-n", "true"]:
            return ("", "", 0) if s.sudo_ok else ("", "sudo: a password is required\n", 1)
        if argv[:3] == ["sudo", "-n", "--"]:
            if not s.sudo_ok:
                return "", "sudo: a password is required\n", 1
            argv = argv[3:]
        env: dict[str, str] = {}
        if argv and argv[0] == "env":
            argv = argv[1:]
            while argv and "=" in argv[0]:
                key, _, value = argv[0].partition("=")
                env[key] = value
                argv = argv[1:]
        prog = argv[0] if argv else ""
        if prog == "id":
            return f"{s.uid}\n", "", 0
        if prog == "mktemp":
            return tempfile.mkdtemp(prefix="staging.", dir=self.root) + "\n", "", 0
        if prog == "python3" and len(argv) > 1 and argv[1].endswith("probe.py"):
            return await asyncio.to_thread(self._probe, argv)
        if prog == "python3" and argv[1:3] == ["-m", "venv"]:
            bin_dir = Path(argv[3]) / "bin"
            bin_dir.mkdir(parents=True, exist_ok=True)
            for name in ("python", "llmgw"):
                (bin_dir / name).write_text("#!/bin/sh\n")
                (bin_dir / name).chmod(0o755)
            return "", "", 0
        if prog.endswith("/bin/python") and argv[1:4] == ["-m", "pip", "download"]:
            return await asyncio.to_thread(_pip_download, argv[4:], env)
        if prog.endswith("/bin/python") and argv[1:4] == ["-m", "pip", "install"]:
            return "Successfully installed llmgw\n", "", 0
        if prog in REAL:
            proc = await asyncio.to_thread(
                subprocess.run, argv, capture_output=True, text=True, timeout=60
            )
            return proc.stdout, proc.stderr, proc.returncode
        if prog == "dpkg-query":
            if argv[-1] in s.installed:
                return "install ok installed", "", 0
            return "", f"dpkg-query: no packages found matching {argv[-1]}\n", 1
        if prog == "apt-get":
            if argv[1] == "update" and s.apt_lock_failures > 0:
                s.apt_lock_failures -= 1
                return "", APT_LOCK, 100
            if argv[1] == "install":
                s.installed.update(a for a in argv[2:] if not a.startswith("-"))
            return "", "", 0
        if prog == "getent" and argv[1:2] == ["passwd"]:
            name = argv[2]
            if name not in s.users:
                return "", "", 2  # getent's "not found"
            uid = s.users[name]
            return f"{name}:x:{uid}:{uid}::/nonexistent:/usr/sbin/nologin\n", "", 0
        if prog in ("useradd", "adduser"):
            s.users[argv[-1]] = 990 + len(s.users)
            return "", "", 0
        if prog == "sh" and s.real_agent:
            return self._agent(" ".join(argv[1:]), env)
        if prog in ("systemctl", "sh"):
            # The agent's start and stop: played (there is no agent here).
            return "", "", 1 if "kill -0" in " ".join(argv) else 0
        return "", f"fake node: no part for {shlex.join(argv)}\n", 127

    def _agent(self, script: str, env: dict[str, str]) -> tuple[str, str, int]:
        """The agent's detached start, its liveness check and its stop, with a real agent."""
        if "kill -0" in script:
            return "", "", 0 if any(p.poll() is None for p in self.agents) else 1
        if script.startswith("-c kill"):
            self.stop_agents()
            return "", "", 0
        start = DETACHED_START.search(script)
        if start is None:
            return "", f"fake node: no part for sh {script}\n", 127
        for path in (start["log"], start["pidfile"]):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(start["log"], "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "llmgw", "agent", "--config", start["config"]],
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
                start_new_session=True,
            )
        self.agents.append(proc)
        Path(start["pidfile"]).write_text(f"{proc.pid}\n")
        return "", "", 0

    def stop_agents(self) -> None:
        """Stop every real agent this node started (SIGTERM, then SIGKILL after 10 s)."""
        for proc in self.agents:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.agents:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.agents.clear()

    def _probe(self, argv: list[str]) -> tuple[str, str, int]:
        env = dict(os.environ, LLMGW_PROBE_ROOT=str(self.sysroot))
        proc = subprocess.run(
            [sys.executable, *argv[1:]], capture_output=True, text=True, env=env, timeout=60
        )
        if proc.returncode != 0:
            return proc.stdout, proc.stderr, proc.returncode
        facts = json.loads(proc.stdout)
        # This machine's package manager is apt-get whatever os-release says.
        facts["package_managers"] = ["apt-get", "dnf", "yum", "zypper"]
        facts.update(self.scenario.probe_patch)
        return json.dumps(facts) + "\n", "", 0


async def start_fake_node(tmp: Path, scenario: Scenario, *, known: bool = True) -> FakeNode:
    node = FakeNode(root=tmp / "node", scenario=scenario)
    node.root.mkdir(parents=True, exist_ok=True)
    node.write_sysroot()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    node.client_key_file = tmp / "id_ed25519"
    client_key.write_private_key(str(node.client_key_file))
    node.client_key_file.chmod(0o600)
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key("openssh").decode())
    node.server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=authorized,
        process_factory=node.handle,
        sftp_factory=asyncssh.SFTPServer,
        allow_scp=False,
    )
    node.port = node.server.sockets[0].getsockname()[1]
    node.host_key = host_key
    node.known_hosts_file = tmp / "known_hosts"
    if known:
        pub = host_key.export_public_key("openssh").decode().split()[:2]
        node.known_hosts_file.write_text(f"[127.0.0.1]:{node.port} {pub[0]} {pub[1]}\n")
    return node


async def stop_fake_node(node: FakeNode) -> None:
    await asyncio.to_thread(node.stop_agents)
    if node.server is not None:
        node.server.close()
        await asyncio.wait_for(node.server.wait_closed(), 10)


def _pip_download(args: list[str], env: dict[str, str]) -> tuple[str, str, int]:
    """pip download, played against the real index pip's config names: every wheel the index
    lists is fetched into --dest (as if each were needed), and the local wheels given copied."""
    import configparser
    import shutil
    from html.parser import HTMLParser
    from urllib.parse import urljoin, urlsplit

    import httpx

    dest = Path(args[args.index("--dest") + 1])
    dest.mkdir(parents=True, exist_ok=True)
    for a in args:
        if a.endswith(".whl") and Path(a).is_file():
            shutil.copy(a, dest / Path(a).name)
    conf = configparser.ConfigParser()
    conf.read(env["PIP_CONFIG_FILE"])
    index = conf["global"]["index-url"]
    parts = urlsplit(index)
    auth = (parts.username or "", parts.password or "")
    base = index.replace(f"{parts.username}:{parts.password}@", "")
    verify = conf["global"].get("cert", True)

    class Links(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.hrefs: list[str] = []

        def handle_starttag(self, tag, attrs) -> None:
            if tag == "a":
                self.hrefs.append(dict(attrs)["href"])

    def links(http: httpx.Client, url: str) -> list[str]:
        page = http.get(url)
        page.raise_for_status()
        found = Links()
        found.feed(page.text)
        return [urljoin(url, h) for h in found.hrefs]

    saved = []
    try:
        with httpx.Client(auth=auth, verify=verify, timeout=30) as http:
            for project in links(http, base):
                for file_url in links(http, project):
                    name = urlsplit(file_url).path.rsplit("/", 1)[-1]
                    (dest / name).write_bytes(http.get(file_url.split("#")[0]).content)
                    saved.append(name)
    except httpx.HTTPError as e:
        return "", f"ERROR: {e}\n", 1
    return "".join(f"Saved {dest / n}\n" for n in saved), "", 0
