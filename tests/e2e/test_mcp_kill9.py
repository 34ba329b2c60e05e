"""Answered means accounted for MCP too: a kill -9 of gatewayd right after tool calls loses no row.

A real ``llmgw server`` answers ``tools/call`` requests of the official MCP SDK
client (2026-07-28) to the built-in ``llmgw:admin`` server, is killed outright
right after the last answer, and is started again: ``mcp_calls`` then holds
exactly one row per call answered (before the MCP call journal, the last
second's rows died with the process, as the usage rows once did).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from llmgw.admin_client import AdminClient
from llmgw.config import load_server_config
from llmgw.paths import Paths
from tests.e2e.helpers import init_on_free_ports, llmgw
from tests.e2e.test_mcp_acceptance import Key, agent
from tests.e2e.test_usage_kill9 import _gatewayd

N = 60


def _mcp_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM mcp_calls").fetchone()[0]


def _ctl(home: Path, *args: str) -> dict:
    done = llmgw(home, "ctl", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else {}


@pytest.mark.timeout(120)
async def test_every_tool_call_answered_before_a_kill_9_of_gatewayd_is_in_mcp_calls_once(
    tmp_path,
):
    home = tmp_path / "home"
    init_on_free_ports(home, "--no-node", "--no-starter")
    paths = Paths.under(home)
    port = int(load_server_config(paths.server_yaml).listen.http.rsplit(":", 1)[1])
    log = tmp_path / "gatewayd.log"
    gatewayd = _gatewayd(home, log, port)
    try:
        # In-process (what ctl sends): each ctl is a process start of its own.
        async with AdminClient.from_paths(paths) as admin:
            await admin.create_tenant("project", "a/b/c", parents=True)
            made = await admin.create_key("a/b/c")
            key = Key(made.key_id, made.secret)
            await admin.grant_mcp(key.key_id, "llmgw:admin.list_nodes")
        answered = 0
        async with agent(f"http://127.0.0.1:{port}/mcp", key, "auto") as c:
            for _ in range(N):
                result = await c.call_tool("llmgw_admin.list_nodes", {})
                assert not result.is_error, result
                answered += 1
            gatewayd.kill()  # SIGKILL right after the last answer: no shutdown, no last batch
            gatewayd.wait(timeout=30)
        before = _mcp_rows(paths.sqlite_file)
        print(f"MCP call rows in the store at the kill: {before} of {answered} answered")

        gatewayd = _gatewayd(home, log, port)  # replays the MCP call journal before it serves
        # ctl mcp usage reads them as before.
        usage = _ctl(home, "mcp", "usage", "--key", key.key_id, "--by", "tool,status")
        groups = {(g["group"]["tool"], g["group"]["status"]): g["calls"] for g in usage["groups"]}
        assert groups == {("list_nodes", "ok"): answered}, log.read_text()[-4000:]
        gatewayd.terminate()
        gatewayd.wait(timeout=60)
        assert _mcp_rows(paths.sqlite_file) == answered, log.read_text()[-4000:]
        assert "MCP call journal" in log.read_text() or before == answered
    finally:
        if gatewayd.poll() is None:
            gatewayd.terminate()
            gatewayd.wait(timeout=60)
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]
