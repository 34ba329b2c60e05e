"""A real control plane in-process on free ports, and agents to connect to it."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import grpclib.const
import pytest
from grpclib.client import Channel

from agentd.agent import Agent
from agentd.discovery import probe_for
from gatewayd.server import GatewayServer
from llmgw.admin_client import AdminClient
from llmgw.config import AgentConfig, HardwareConfig, ServerConfig, StoreConfig, load_server_config
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server, issue_node_bundle
from llmgw.tls.tlsconf import client_context
from proto.llmgw.v1 import AgentMessage, ControlMessage


async def wait_for(predicate, *, attempts: int = 200, interval_s: float = 0.05):
    """Poll an async or sync predicate until it returns something truthy (bounded)."""
    for _ in range(attempts):
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(interval_s)
    raise AssertionError(f"condition not met after {attempts} attempts")


def point_the_cli_at(cluster: Cluster) -> None:
    """server.yaml names the admin port the in-process server really got (it asked for 0)."""
    yaml = cluster.paths.server_yaml
    port = cluster.server.ports["admin"]
    yaml.write_text(re.sub(r"admin: \S+", f"admin: 127.0.0.1:{port}", yaml.read_text()))


@dataclass
class Cluster:
    paths: Paths
    server: GatewayServer
    token: str
    agents: list[tuple[Agent, asyncio.Event, asyncio.Task]] = field(default_factory=list)

    @property
    def agent_address(self) -> str:
        return f"127.0.0.1:{self.server.ports['agent']}"

    def admin(self, token: str | None = None) -> AdminClient:
        return AdminClient(f"127.0.0.1:{self.server.ports['admin']}", token or self.token)

    async def ctl(self, *args: str) -> tuple[int, str, str]:
        """``llmgw ctl ARGS`` as an operator runs it, in its own process: exit code, out, err."""
        point_the_cli_at(self)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "llmgw",
            "ctl",
            *args,
            env={**os.environ, "LLMGW_HOME": str(self.paths.home), "COLUMNS": "200"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        out, err = await proc.communicate()
        return proc.returncode, out.decode(), err.decode()

    def agent_config(self, node_id: str, *, fixture: str = "", cert_paths=None) -> AgentConfig:
        bundle = issue_node_bundle(self.paths, node_id, control_planes=[self.agent_address])
        cfg = bundle.agent_config
        if cert_paths is not None:
            cfg.pki.ca_cert, cfg.pki.cert, cfg.pki.key = (str(p) for p in cert_paths)
        if fixture:
            cfg.hardware = HardwareConfig(probe="fake", fixture=fixture)
        cfg.data_dir = str(self.paths.agent_data_dir / node_id)
        # As `llmgw up` does: engines run as the user running the tests.
        cfg.engine_user = getpass.getuser()
        return cfg

    async def start_agent(self, node_id: str, *, fixture: str = "", cfg: AgentConfig | None = None):
        cfg = cfg or self.agent_config(node_id, fixture=fixture)
        agent = Agent(cfg, self.paths, probe=probe_for(cfg.hardware, Path(cfg.data_dir)))
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        self.agents.append((agent, stop, task))
        return agent, stop, task

    async def wait_nodes_ready(self, *node_ids: str) -> None:
        """Wait until the cluster's nodes are exactly ``node_ids``, all ready."""
        want = sorted((n, "ready") for n in node_ids)

        async def all_ready():
            async with self.admin() as admin:
                nodes = (await admin.list_nodes()).nodes
            return sorted((n.node_id, n.state) for n in nodes) == want

        await wait_for(all_ready, attempts=200)

    def kill_engines(self) -> None:
        """SIGTERM every engine a replica started: an agent stopped mid-test leaves them."""
        for r in self.server.reconciler.replicas.values():
            if r.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.pid, signal.SIGTERM)

    async def stop_agents(self) -> None:
        for _, stop, task in self.agents:
            stop.set()
        for _, _, task in self.agents:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 10)
        self.agents.clear()


def make_server_config(paths: Paths, **nodes) -> ServerConfig:
    cfg = load_server_config(paths.server_yaml)
    for k, v in nodes.items():
        setattr(cfg.nodes, k, v)
    return cfg


@contextlib.asynccontextmanager
async def running_cluster(
    tmp_path: Path, *, store: StoreConfig | None = None, engines=(), configure=None, **nodes
):
    paths = Paths.under(tmp_path / "home")
    if not paths.server_yaml.exists():
        init_server(paths, hosts=["localhost"])
    cfg = make_server_config(paths, **nodes)
    # Port 0 everywhere: tests run side by side; the server reports what it got.
    cfg.listen.agent, cfg.listen.admin = "127.0.0.1:0", "127.0.0.1:0"
    cfg.listen.http, cfg.listen.metrics = "127.0.0.1:0", "127.0.0.1:0"
    if store is not None:
        cfg.store = store
    cfg.engines = list(engines)
    if configure is not None:
        configure(cfg)  # a test's own server.yaml settings
    server = GatewayServer(cfg, paths)
    await server.start()
    cluster = Cluster(paths, server, paths.admin_token_file.read_text().strip())
    try:
        yield cluster
    finally:
        agents = [agent for agent, _, _ in cluster.agents]
        await cluster.stop_agents()
        # Agents leave engines running (they are adopted on return); a test's
        # cluster going away takes its engines with it: those the control plane
        # knows, and those only their agent knew (one restarted after a failure
        # and not yet reported was seen left running, parent 1, after a run).
        groups = (
            {r.pid for r in server.reconciler.replicas.values()} if server.reconciler else set()
        )
        for agent in agents:
            groups |= {s.pgid or s.pid for s in agent.shards.supervisor.running()}
        for pgid in groups - {None, 0}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
        # Their doors too (each a process beside its engine, agentd/door/keeper.py).
        for agent in agents:
            doors = agent.shards.doors
            for pid in doors.pids() if doors is not None else []:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
        await server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def cluster(request, tmp_path):
    """A running control plane on each store backend."""
    store = None
    if request.param == "postgres":
        store = StoreConfig(dsn=request.getfixturevalue("fresh_postgres_dsn"))
    async with running_cluster(tmp_path, store=store) as c:
        yield c


class RawAgentStream:
    """A hand-driven agent stream, for what a well-behaved agent never does."""

    def __init__(self, cluster, cfg):
        self._ssl = client_context(cfg.pki.ca_cert, cfg.pki.cert, cfg.pki.key)
        self._port = cluster.server.ports["agent"]

    async def __aenter__(self):
        self._channel = Channel("127.0.0.1", self._port, ssl=self._ssl)
        self._cm = self._channel.request(
            "/llmgw.v1.AgentService/Connect",
            grpclib.const.Cardinality.STREAM_STREAM,
            AgentMessage,
            ControlMessage,
        )
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc):
        try:
            return await self._cm.__aexit__(*exc)
        finally:
            self._channel.close()
