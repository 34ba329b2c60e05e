"""``llmgw up`` as a new user runs it: a cluster on one machine, supervised."""

from __future__ import annotations

import json
import signal

import httpx
import psutil
import pytest
import yaml

from tests.e2e.helpers import (
    init_on_free_ports,
    llmgw,
    nodes_json,
    start,
    wait_until,
)
from tests.engine_access import replica_headers


def _only_node(home, state=None, reason_prefix=""):
    nodes = nodes_json(home)
    if not nodes or len(nodes) != 1:
        return None
    n = nodes[0]
    if state and n["state"] != state:
        return None
    if reason_prefix and not n["reason"].startswith(reason_prefix):
        return None
    return n


def _ready_replica(home, reason_word=""):
    res = llmgw(home, "ctl", "replicas", "--json", timeout_s=20)
    if res.returncode != 0:
        return None
    for r in json.loads(res.stdout)["replicas"]:
        if r["state"] == "ready" and r["endpoint"] and reason_word in r["reason"]:
            return r
    return None


def _child(up: psutil.Process, word: str) -> psutil.Process | None:
    for c in up.children():
        try:
            if word in c.cmdline():
                return c
        except psutil.Error:  # exited (a zombie until `up` reaps it)
            continue
    return None


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_flags(request):
    if request.param == "sqlite":
        return {}
    return {"LLMGW_STORE_DSN": request.getfixturevalue("fresh_postgres_dsn")}


def test_up_runs_a_cluster_whose_node_goes_not_ready_when_frozen_and_is_restarted_when_killed(
    tmp_path, store_flags
):
    home = tmp_path / "home"
    init_on_free_ports(home, **store_flags)
    up = start(home, "up")
    proc = psutil.Process(up.pid)
    try:
        node = wait_until(lambda: _only_node(home, "ready"), timeout_s=30)
        host = node["host"]
        assert host["os_id"] and host["arch"] and host["cpu_flags"]
        assert host["memory_total_bytes"] > 0
        assert node["gpus"] == [] and host["gpu_note"] == "no NVIDIA driver"
        if store_flags:
            assert "dsn_file" in yaml.safe_load((home / "etc/server.yaml").read_text())["store"]

        # Frozen: its stream stays open but says nothing.
        agent = wait_until(lambda: _child(proc, "agent"))
        agent.send_signal(signal.SIGSTOP)
        frozen = wait_until(lambda: _only_node(home, "not_ready"), timeout_s=30)
        assert frozen["reason"]
        agent.send_signal(signal.SIGCONT)
        back = wait_until(lambda: _only_node(home, "ready", "back after"), timeout_s=40)
        assert frozen["reason"] in back["reason"]

        # The starter model is served by real llama.cpp on this CPU.
        replica = wait_until(lambda: _ready_replica(home), timeout_s=180)
        # In through the replica's door, with the replica's own key (as the gateway goes).
        door_headers = replica_headers(home / "etc/secrets", replica)
        answer = httpx.post(
            f"{replica['endpoint']}/v1/chat/completions",
            headers=door_headers,
            json={
                "model": replica["model"],
                "max_tokens": 4,
                "messages": [{"role": "user", "content": "Hi"}],
            },
            timeout=60,
        )
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] > 0

        # Killed outright: `llmgw up` restarts it, and says so; the engine
        # keeps running and is adopted (same pid, no restart).
        agent.kill()
        wait_until(lambda: (a := _child(proc, "agent")) and a.pid != agent.pid, timeout_s=30)
        wait_until(lambda: _only_node(home, "ready", "back after"), timeout_s=40)
        adopted = wait_until(lambda: _ready_replica(home, "adopted"), timeout_s=60)
        assert adopted["pid"] == replica["pid"] and adopted["restarts"] == 0
        engine = psutil.Process(replica["pid"])
    finally:
        children = proc.children(recursive=True)
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=30)
    assert up.returncode == 0, out
    assert "agentd exited unexpectedly" in out and "restarting it" in out
    assert "Stopped." in out
    _, alive = psutil.wait_procs([*children, engine], timeout=15)
    assert alive == [], f"left running: {alive}"
