"""HAProxy for the fault suite: deploy/haproxy/haproxy.cfg with loopback ports and the suite's
control planes as its servers.

Only what differs on loopback is changed: the two ``bind`` lines, the
``server`` lines of both backends, the client backend's check path when a
test asks for another, the runtime API's socket (under the test's folder,
where the harness reads which servers HAProxy counts as up), and ``maxconn``
where this machine's descriptor limit is below what it takes. The server lines
keep the shipped options (``send-proxy-v2 check-send-proxy``) and connect from
``PROXY_SOURCE``, a loopback address of HAProxy's own: the control planes trust
that one (``behind_haproxy``), while the suite's own probes from 127.0.0.1 stay
plain HTTP, believed about nothing. ``proxy_protocol=False`` drops the header
for backends that cannot read it (test_front.py's small servers).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmgw.config import HttpConfig, ServerConfig
from tests.faults.harness.deploy_files import deploy_file
from tests.faults.harness.procs import (
    HarnessError,
    Proc,
    free_port,
    require_binaries,
    wait_until,
)

HAPROXY = "/usr/sbin/haproxy"
CLIENT_BACKEND = "control_planes"
LEADER_BACKEND = "leader"
READY_TIMEOUT_S = 30.0
# The address HAProxy dials the control planes from (all of 127/8 is this machine's).
PROXY_SOURCE = "127.0.0.10"
_PROXY_OPTIONS = ("send-proxy-v2", "check-send-proxy", "send-proxy")


def behind_haproxy(cfg: ServerConfig) -> None:
    """A control plane's server.yaml for the shipped HAProxy in front: it trusts
    ``PROXY_SOURCE``, and connections from there start with a PROXY header."""
    cfg.http = HttpConfig(trusted_proxies=[PROXY_SOURCE], proxy_protocol=True)


def _maxconn(wanted: int) -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return wanted
    return max(256, min(wanted, (hard - 200) // 2))


def render_haproxy_config(
    root: Path,
    *,
    front_port: int,
    leader_port: int,
    backends: Sequence[str],
    check_path: str = "/ready",
    proxy_protocol: bool = True,
    server_options: Sequence[str] = (),
) -> Path:
    """deploy/haproxy/haproxy.cfg on loopback: ``backends`` are ``host:port`` of each gatewayd;
    ``server_options`` go on each ``server`` line besides the shipped ones (``ssl …``)."""
    text = deploy_file("haproxy/haproxy.cfg").read_text()
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            section = line.strip()
        stripped = line.strip()
        if stripped.startswith("maxconn ") and section == "global":
            # Two descriptors a connection: fit the limit this machine gives a process.
            line = f"    maxconn {_maxconn(int(stripped.split()[1]))}"
        elif stripped.startswith("stats socket "):
            line = re.sub(r"stats socket \S+", f"stats socket {root / 'admin.sock'}", line)
        elif stripped.startswith("bind "):
            port = front_port if section == "frontend llmgw_client" else leader_port
            line = f"    bind 127.0.0.1:{port}"
        elif stripped.startswith("server "):
            if stripped.startswith("server cp1 "):  # the backend's list, swapped whole
                opts = stripped.split()[3:]
                if proxy_protocol:
                    opts += ["source", PROXY_SOURCE]
                else:
                    opts = [o for o in opts if o not in _PROXY_OPTIONS]
                tail = " ".join([*opts, *server_options])
                out += [f"    server cp{i} {addr} {tail}" for i, addr in enumerate(backends, 1)]
            continue
        elif stripped.startswith("http-check send ") and section == f"backend {CLIENT_BACKEND}":
            line = f"    http-check send meth GET uri {check_path}"
        out.append(line)
    path = root / "haproxy.cfg"
    path.write_text("\n".join(out) + "\n")
    return path


@dataclass
class HAProxy:
    """A running HAProxy: the client front, the leader front, and its runtime API."""

    proc: Proc
    front_port: int
    leader_port: int
    socket_path: Path
    config_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.front_port}"

    @property
    def leader_url(self) -> str:
        return f"http://127.0.0.1:{self.leader_port}"

    async def command(self, line: str) -> str:
        """One runtime API command (``show stat``, ``show servers state``…); its answer."""
        reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
        try:
            writer.write(line.encode() + b"\n")
            await writer.drain()
            return (await asyncio.wait_for(reader.read(), 5.0)).decode()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def server_states(self, backend: str = CLIENT_BACKEND) -> dict[str, str]:
        """Each server of ``backend`` and what HAProxy makes of it: UP, DOWN, ``UP 1/2``…"""
        csv = await self.command("show stat")
        header, *rows = [line for line in csv.splitlines() if line]
        cols = header.lstrip("# ").split(",")
        at = {name: i for i, name in enumerate(cols)}
        states = {}
        for row in rows:
            f = row.split(",")
            if f[at["pxname"]] == backend and f[at["svname"]] not in ("FRONTEND", "BACKEND"):
                states[f[at["svname"]]] = f[at["status"]]
        return states

    async def servers_up(self, backend: str = CLIENT_BACKEND) -> set[str]:
        """The servers HAProxy sends to now: UP, and "UP 1/2" (failing, not yet out);
        not "DOWN 1/2" (passing, not yet in)."""
        return {s for s, st in (await self.server_states(backend)).items() if st.startswith("UP")}

    async def wait_servers_up(
        self, count: int, backend: str = CLIENT_BACKEND, timeout_s: float = READY_TIMEOUT_S
    ) -> set[str]:
        """Wait until exactly ``count`` servers of ``backend`` are up; their names."""

        async def enough() -> set[str] | None:
            if not self.proc.running:
                raise HarnessError(f"haproxy exited:\n{self.proc.log_tail()}")
            up = await self.servers_up(backend)
            return up if len(up) == count else None

        return await wait_until(
            enough, timeout_s=timeout_s, what=f"{count} servers up in {backend}"
        )


@contextlib.asynccontextmanager
async def haproxy(
    root: Path,
    backends: Sequence[str],
    *,
    front_port: int = 0,
    leader_port: int = 0,
    check_path: str = "/ready",
    proxy_protocol: bool = True,
    server_options: Sequence[str] = (),
) -> AsyncIterator[HAProxy]:
    """Run HAProxy in front of ``backends`` (``host:port``); port 0 picks a free one."""
    require_binaries(HAPROXY)
    root.mkdir(parents=True, exist_ok=True)
    front_port, leader_port = front_port or free_port(), leader_port or free_port()
    config = render_haproxy_config(
        root,
        front_port=front_port,
        leader_port=leader_port,
        backends=backends,
        check_path=check_path,
        proxy_protocol=proxy_protocol,
        server_options=server_options,
    )
    check = await asyncio.create_subprocess_exec(
        HAPROXY, "-c", "-q", "-f", str(config), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    said, _ = await check.communicate()
    if check.returncode != 0:
        raise HarnessError(f"haproxy refused {config}:\n{said.decode(errors='replace')}")
    # -db: in the foreground, logging to stdout (the deploy file's `log stdout`).
    proc = Proc("haproxy", [HAPROXY, "-db", "-f", str(config)], root / "haproxy.log")
    await proc.start()
    lb = HAProxy(proc, front_port, leader_port, root / "admin.sock", config)
    try:

        async def answering() -> bool:
            if not proc.running:
                raise HarnessError(f"haproxy exited:\n{proc.log_tail()}")
            await lb.command("show info")
            return True

        await wait_until(answering, timeout_s=READY_TIMEOUT_S, what="haproxy's runtime API")
        yield lb
    finally:
        await proc.stop()
