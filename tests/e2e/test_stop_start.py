"""``llmgw stop|start|restart`` with real processes, on a machine without systemd.

The control plane and the agent of a home that ``server init --node`` set up
are started detached, found again by their pid files, stopped agent first
and brought back by ``restart``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal

import psutil

from llmgw.paths import Paths
from tests.e2e.helpers import init_on_free_ports, llmgw, nodes_json, wait_until


def _pid(out: str, part: str, action: str) -> int:
    m = re.search(rf"^{part}: {action} \(pid (\d+)\)", out, re.MULTILINE)
    assert m, out
    return int(m.group(1))


def _ready_node(home):
    nodes = nodes_json(home)
    return nodes and nodes[0]["state"] == "ready"


def _leave_nothing_running(home) -> None:
    paths = Paths.under(home)
    for f in (paths.agent_pid_file, paths.server_pid_file):
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            os.kill(int(f.read_text()), signal.SIGKILL)


def test_start_stop_and_restart_bring_the_control_plane_and_agent_up_and_down(tmp_path) -> None:
    home = tmp_path / "home"
    init_on_free_ports(home, "--node", "--no-starter")
    try:
        started = llmgw(home, "start", timeout_s=60)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "mirror: not set up here" in started.stdout
        server = _pid(started.stdout, "control plane", "started")
        agent = _pid(started.stdout, "agent", "started")
        # They answer as soon as start returns: it waited for them.
        assert llmgw(home, "ctl", "status", timeout_s=20).returncode == 0
        wait_until(lambda: _ready_node(home), timeout_s=20)

        again = llmgw(home, "start", "--json", timeout_s=60)
        parts = {p["part"]: p for p in json.loads(again.stdout)["parts"]}
        assert parts["control plane"]["action"] == "already running"
        assert parts["control plane"]["pid"] == server and parts["agent"]["pid"] == agent

        stopped = llmgw(home, "stop", timeout_s=90)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        lines = stopped.stdout.splitlines()
        assert lines[0].startswith(f"agent: stopped (pid {agent})"), stopped.stdout
        assert f"control plane: stopped (pid {server})" in stopped.stdout
        assert not psutil.pid_exists(server) or psutil.Process(server).status() == "zombie"
        assert llmgw(home, "ctl", "status", timeout_s=20).returncode != 0
        assert not Paths.under(home).server_pid_file.exists()  # removed by its clean exit
        assert "control plane: not running" in llmgw(home, "stop").stdout

        back = llmgw(home, "restart", timeout_s=120)
        assert back.returncode == 0, back.stdout + back.stderr
        assert "control plane: not running" in back.stdout
        assert _pid(back.stdout, "control plane", "started") != server
        assert llmgw(home, "ctl", "status", timeout_s=20).returncode == 0
        wait_until(lambda: _ready_node(home), timeout_s=20)
    finally:
        done = llmgw(home, "stop", timeout_s=90)
        if done.returncode != 0:
            _leave_nothing_running(home)
    assert done.returncode == 0, done.stdout + done.stderr
