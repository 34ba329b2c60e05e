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


def _ready_replica(home, reason_word=""):
    res = llmgw(home, "ctl", "replicas", "--json", timeout_s=20)
    if res.returncode != 0:
        return None
    for r in json.loads(res.stdout)["replicas"]:
        if r["state"] == "ready" and r["pid"] and reason_word in r["reason"]:
            return r
    return None


def _leave_nothing_running(home, engines: list[int]) -> None:
    paths = Paths.under(home)
    pids = []
    for f in (paths.agent_pid_file, paths.server_pid_file):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(f.read_text()))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in engines:  # each engine leads its own process group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_start_restart_and_stop_run_the_control_plane_and_agent_and_keep_the_engines(
    tmp_path,
) -> None:
    home = tmp_path / "home"
    init_on_free_ports(home, "--node", "--no-starter")
    engines: list[int] = []
    try:
        started = llmgw(home, "start", timeout_s=60)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "mirror: not set up here" in started.stdout
        server = _pid(started.stdout, "control plane", "started")
        agent = _pid(started.stdout, "agent", "started")
        wait_until(lambda: _ready_node(home), timeout_s=20)
        served = llmgw(home, "ctl", "model", "serve", "/m/x.gguf", "--engine", "sim", "--cpu")
        assert served.returncode == 0, served.stderr
        engine = wait_until(lambda: _ready_replica(home), timeout_s=30)["pid"]
        engines.append(engine)

        again = llmgw(home, "start", "--json", timeout_s=60)
        parts = {p["part"]: p for p in json.loads(again.stdout)["parts"]}
        assert parts["control plane"]["action"] == "already running"
        assert parts["control plane"]["pid"] == server and parts["agent"]["pid"] == agent

        back = llmgw(home, "restart", timeout_s=120)
        assert back.returncode == 0, back.stdout + back.stderr
        lines = back.stdout.splitlines()
        assert lines[0].startswith(f"agent: stopped (pid {agent})"), back.stdout
        assert f"control plane: stopped (pid {server})" in back.stdout
        assert _pid(back.stdout, "control plane", "started") != server
        # It answers as soon as restart returns: start waited for it.
        assert llmgw(home, "ctl", "status", timeout_s=20).returncode == 0
        # The agent that came back took its engine over: same process, not restarted.
        adopted = wait_until(lambda: _ready_replica(home, "adopted"), timeout_s=30)
        assert adopted["pid"] == engine and adopted["restarts"] == 0

        stopped = llmgw(home, "stop", timeout_s=90)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert stopped.stdout.startswith("agent: stopped"), stopped.stdout
        assert "control plane: stopped" in stopped.stdout
        assert llmgw(home, "ctl", "status", timeout_s=20).returncode != 0
        assert not Paths.under(home).server_pid_file.exists()  # removed by its clean exit
        # The failure it guards: stopping the agent taking its engines down with it.
        assert psutil.Process(engine).status() != psutil.STATUS_ZOMBIE
    finally:
        done = llmgw(home, "stop", timeout_s=90)
        _leave_nothing_running(home, engines)  # the engine outlives the agent, by design
    assert done.returncode == 0, done.stdout + done.stderr
    assert "control plane: not running" in done.stdout
