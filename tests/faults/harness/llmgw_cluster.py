"""llmgw itself for the fault suite: control planes (``llmgw server``) and a node agent
(``llmgw agent``), each a real process on loopback, on the Patroni cluster's store.

Each control plane reaches every Patroni member through ``StoreLink``s of its
own, so the suite can cut one control plane from the store and leave the
others be. The first control plane's home is made by ``init_server``; the
others get its CA, certificates and secrets, as ``llmgw server add`` carries
them, and data folders of their own. Ports are fixed at the start, so a
control plane restarted after a fault is the same server to HAProxy and to
the agent.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gatewayd.cluster.identity import control_plane_id
from llmgw.admin_client import AdminClient
from llmgw.config import HardwareConfig, StoreConfig, dump_yaml, load_server_config
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server, issue_node_bundle
from llmgw.setup.server_add_files import ensure_shared_secrets
from tests.e2e.helpers import env_for
from tests.faults.harness.haproxy import behind_haproxy
from tests.faults.harness.patroni import PatroniCluster
from tests.faults.harness.procs import HarnessError, Proc, free_port, wait_until
from tests.faults.harness.store_link import StoreLink

LLMGW = [sys.executable, "-m", "llmgw"]
START_TIMEOUT_S = 60.0
# What the suite asks of /leader and /health: a frozen process answers nothing.
PROBE_TIMEOUT_S = 0.5


@dataclass
class ControlPlane:
    """One gatewayd: its home, its fixed ports, its links to the store, its process."""

    name: str
    home: Path
    ports: dict[str, int]
    links: list[StoreLink]
    proc: Proc | None = None
    starts: int = 0

    @property
    def paths(self) -> Paths:
        return Paths.under(self.home)

    @property
    def control_plane_id(self) -> str:
        return control_plane_id(self.paths)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.ports['http']}"

    @property
    def agent_address(self) -> str:
        return f"127.0.0.1:{self.ports['agent']}"

    def admin(self) -> AdminClient:
        token = self.paths.admin_token_file.read_text().strip()
        return AdminClient(f"127.0.0.1:{self.ports['admin']}", token)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.running

    @property
    def log_path(self) -> Path:
        return self.home / "gatewayd.log"

    async def start(self) -> None:
        self.proc = Proc(
            self.name, LLMGW + ["server"], self.log_path, env=env_for(self.home), cwd=self.home
        )
        with self.log_path.open("a") as log:
            log.write(f"\n=== start {self.starts + 1}\n")
        await self.proc.start()
        self.starts += 1
        proc = self.proc

        async def healthy() -> bool:
            if not proc.running:
                raise HarnessError(f"{self.name} exited:\n{proc.log_tail()}")
            return await self.probe("/health") == 200

        await wait_until(healthy, timeout_s=START_TIMEOUT_S, what=f"{self.name} up")

    async def probe(self, path: str) -> int | None:
        """The status ``path`` answers with, or None (down, frozen, refused)."""
        try:
            async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
                return (await client.get(self.http_url + path)).status_code
        except httpx.HTTPError:
            return None

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown, nothing flushed."""
        assert self.proc is not None
        self.proc.signal(signal.SIGKILL)

    async def reap(self) -> None:
        if self.proc is not None:
            await self.proc.wait(30)

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.signal(signal.SIGCONT)

    async def stop(self) -> None:
        """SIGTERM: a clean stop (lease given up, answers begun are finished)."""
        if self.proc is not None:
            await self.proc.stop(grace_s=60)

    def cut_from_store(self) -> None:
        for link in self.links:
            link.cut()

    def restore_store(self) -> None:
        for link in self.links:
            link.restore()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class NodeAgent:
    """``llmgw agent`` on a fake CPU inventory; its engines (sim) outlive it, as on a node."""

    home: Path
    config: Path
    proc: Proc | None = None

    @property
    def log_path(self) -> Path:
        return self.home / "agent.log"

    async def start(self) -> None:
        argv = LLMGW + ["agent", "--config", str(self.config)]
        self.proc = Proc("agent", argv, self.log_path, env=env_for(self.home), cwd=self.home)
        await self.proc.start()

    def kill(self) -> None:
        """SIGKILL the agent alone: its engines run in sessions of their own and stay."""
        assert self.proc is not None and self.proc.running
        os.kill(self.proc.pid, signal.SIGKILL)

    async def reap(self) -> None:
        if self.proc is not None:
            await self.proc.wait(30)

    async def stop(self) -> None:
        if self.proc is not None:
            await self.proc.stop(grace_s=30)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class LlmgwCluster:
    control_planes: list[ControlPlane]
    agent: NodeAgent
    store_dsn: str  # the Patroni DSN, every member: for the suite's own reads
    links: list[StoreLink] = field(default_factory=list)
    # Every engine pid the suite has seen: the agent leaves its engines running
    # (adopted on its return), so the suite ends them itself.
    engine_pids: set[int] = field(default_factory=set)

    def by_id(self, cp_id: str) -> ControlPlane:
        return next(cp for cp in self.control_planes if cp.control_plane_id == cp_id)

    async def leaders(self) -> list[ControlPlane]:
        """The control planes whose /leader answers 200 now."""
        return [cp for cp in self.control_planes if await cp.probe("/leader") == 200]

    async def leader(
        self, timeout_s: float = 30.0, *, other_than: ControlPlane | None = None
    ) -> ControlPlane:
        """The one control plane leading (once there is one, and not ``other_than``)."""

        async def one() -> ControlPlane | None:
            found = await self.leaders()
            return found[0] if len(found) == 1 and found[0] is not other_than else None

        return await wait_until(one, timeout_s=timeout_s, interval_s=0.1, what="one leader")


def _write_control_plane(
    cp_home: Path, source: Paths | None, ports: dict[str, int], dsn: str, lease_ttl_s: float
) -> None:
    paths = Paths.under(cp_home)
    if source is None:
        init_server(paths, hosts=["localhost", "127.0.0.1"])
        # The secrets gatewayd would make at its first start, made now, as server add does.
        ensure_shared_secrets(paths)
    else:
        shutil.copytree(source.config_dir, paths.config_dir)
    cfg = load_server_config(paths.server_yaml)
    cfg.listen.agent = f"127.0.0.1:{ports['agent']}"
    cfg.listen.admin = f"127.0.0.1:{ports['admin']}"
    cfg.listen.http = f"127.0.0.1:{ports['http']}"
    cfg.listen.metrics = f"127.0.0.1:{ports['metrics']}"
    cfg.store = StoreConfig(dsn=dsn)
    cfg.cluster.lease_ttl_s = lease_ttl_s
    cfg.cluster.advertise_host = "127.0.0.1"
    # The suite puts the shipped HAProxy (send-proxy-v2) in front of them.
    behind_haproxy(cfg)
    paths.server_yaml.write_text(dump_yaml(cfg))
    control_plane_id(paths)  # made now, so the suite knows each one's id before it starts


@contextlib.asynccontextmanager
async def llmgw_cluster(
    root: Path, patroni: PatroniCluster, *, control_planes: int = 3, lease_ttl_s: float = 10.0
) -> AsyncIterator[LlmgwCluster]:
    """``control_planes`` gatewayd on ``patroni``'s database, one agent; all stopped after."""
    members = sorted(patroni.members.values(), key=lambda m: m.name)
    user_part, _, rest = patroni.dsn().partition("@")
    database_and_query = rest.split("/", 1)[1]
    cps: list[ControlPlane] = []
    all_links: list[StoreLink] = []
    agent: NodeAgent | None = None
    cluster: LlmgwCluster | None = None
    try:
        first: Paths | None = None
        for i in range(1, control_planes + 1):
            links = [await StoreLink(m.host_port).start() for m in members]
            all_links += links
            hosts = ",".join(link.address for link in links)
            dsn = f"{user_part}@{hosts}/{database_and_query}"
            ports = {name: free_port() for name in ("agent", "admin", "http", "metrics")}
            home = root / f"cp{i}"
            _write_control_plane(home, first, ports, dsn, lease_ttl_s)
            first = first or Paths.under(home)
            cps.append(ControlPlane(f"cp{i}", home, ports, links))
        # One at a time: the first leads, the others stand by.
        for cp in cps:
            await cp.start()

        agent_home = root / "node"
        agent_home.mkdir(parents=True)
        assert first is not None
        bundle = issue_node_bundle(first, "node-a", control_planes=[cp.agent_address for cp in cps])
        cfg = bundle.agent_config
        cfg.hardware = HardwareConfig(probe="fake", fixture="cpu_only_16c")
        cfg.data_dir = str(agent_home / "data")
        cfg.engine_user = getpass.getuser()
        config = agent_home / "agent.yaml"
        config.write_text(dump_yaml(cfg))
        agent = NodeAgent(agent_home, config)
        await agent.start()
        cluster = LlmgwCluster(cps, agent, patroni.dsn(), all_links)
        yield cluster
    finally:
        if agent is not None:
            await agent.stop()
        for pid in cluster.engine_pids if cluster is not None else ():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        for cp in cps:
            if cp.proc is not None:
                cp.thaw()
                await cp.stop()
        for link in all_links:
            await link.close()
