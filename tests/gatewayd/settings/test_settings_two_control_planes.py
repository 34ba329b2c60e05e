"""Two control planes on one real PostgreSQL: a setting changed on one is in force on both and on the agent.

Real gatewayd servers in-process on loopback, a real agent over mutual TLS,
``llmgw ctl config`` as an operator types it. Whichever control plane leads,
the test holds: the agent is on the leader, and the change is made on each
of them in turn.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gatewayd.server import GatewayServer
from llmgw.cli.main import app as llmgw_cli
from llmgw.config import StoreConfig
from llmgw.errors import ExitCode
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from tests.cluster_fixture import Cluster, make_server_config, wait_for

pytestmark = pytest.mark.postgres

# The bound: in force on the other control plane and on the agents within 5 s.
IN_FORCE_BOUND_S = 5.0
LEASE_TTL_S = 2.0


def _config(paths: Paths, dsn: str):
    cfg = make_server_config(paths)
    cfg.listen.agent, cfg.listen.admin = "127.0.0.1:0", "127.0.0.1:0"
    cfg.listen.http, cfg.listen.metrics = "127.0.0.1:0", "127.0.0.1:0"
    cfg.store = StoreConfig(dsn=dsn)
    cfg.cluster.lease_ttl_s = LEASE_TTL_S
    cfg.cluster.advertise_host = "127.0.0.1"
    return cfg


async def _start(paths: Paths, dsn: str) -> GatewayServer:
    server = GatewayServer(_config(paths, dsn), paths)
    await server.start()
    # ctl finds the admin port in server.yaml: the one this server really got.
    yaml = paths.server_yaml
    port = server.ports["admin"]
    yaml.write_text(re.sub(r"admin: \S+", f"admin: 127.0.0.1:{port}", yaml.read_text()))
    return server


async def ctl(paths: Paths, *args: str):
    def run():
        return CliRunner().invoke(
            llmgw_cli,
            ["ctl", "config", *args],
            env={"LLMGW_HOME": str(paths.home), "COLUMNS": "200"},
        )

    return await asyncio.to_thread(run)


async def _within(bound_s: float, condition) -> float:
    """Seconds until ``condition()`` holds; fails once ``bound_s`` has passed without it."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > bound_s:
            raise AssertionError(f"not in force within {bound_s:g} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def _max_queue(server: GatewayServer) -> int:
    return server.gateway.bands.config.bands[0].max_queue


async def test_a_setting_changed_on_one_control_plane_is_in_force_on_the_other_and_the_agent(
    tmp_path: Path, fresh_postgres_dsn: str
):
    first = Paths.under(tmp_path / "a")
    init_server(first, hosts=["localhost", "127.0.0.1"])
    second = Paths.under(tmp_path / "b")
    shutil.copytree(first.config_dir, second.config_dir)
    a = await _start(first, fresh_postgres_dsn)
    b = await _start(second, fresh_postgres_dsn)
    cluster = Cluster(first, a, first.admin_token_file.read_text().strip())
    try:
        # Both started on the version the first one seeded from server.yaml.
        assert a.settings.version == b.settings.version == 1
        cfg = cluster.agent_config("cpu-a", fixture="cpu_only_16c")
        cfg.control_planes = [f"127.0.0.1:{a.ports['agent']}", f"127.0.0.1:{b.ports['agent']}"]
        agent, _, _ = await cluster.start_agent("cpu-a", cfg=cfg)
        await wait_for(
            lambda: agent.connected_to is not None and agent.live.version == 1, attempts=400
        )

        # Set on b: in force on a, on b and on the agent (on whichever leads) within 5 s.
        done = await ctl(
            second,
            "set",
            "router.admission.bands[0].max_queue=3",
            "agents.default.heartbeat_interval_ms=700",
            "--comment",
            "tighter",
        )
        assert done.exit_code == 0, done.output
        took_s = await _within(
            IN_FORCE_BOUND_S,
            lambda: _max_queue(a) == _max_queue(b) == 3 and agent.heartbeat_interval_s == 0.7,
        )
        print(f"set on one control plane, in force on both and the agent in {took_s:.2f} s")
        assert a.settings.version == b.settings.version == 2

        # Roll back on a: version 1's values again, everywhere, as version 3.
        back = await ctl(first, "rollback", "1")
        assert back.exit_code == 0, back.output
        await _within(
            IN_FORCE_BOUND_S,
            lambda: _max_queue(a) == _max_queue(b) == 1000 and agent.heartbeat_interval_s == 2.0,
        )
        assert a.settings.version == b.settings.version == 3
        history = await ctl(second, "history", "--json")
        versions = json.loads(history.stdout)["versions"]
        assert [(v["version"], v["comment"]) for v in versions] == [
            (3, "back to version 1"),
            (2, "tighter"),
            (1, "from server.yaml"),
        ]

        # A bad value is refused on either, naming the key and what it expects.
        refused = await ctl(second, "set", "router.admission.bands[0].queue_ttl=-1")
        assert refused.exit_code == ExitCode.USAGE
        assert "router.admission.bands[0].queue_ttl: must be greater than 0" in refused.stderr
        assert a.settings.version == b.settings.version == 3
    finally:
        await cluster.stop_agents()
        await b.stop()
        await a.stop()
