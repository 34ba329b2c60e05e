"""`llmgw ctl node show` on `llmgw up`'s own node: the memory bandwidth the agent measured.

This machine's real probe (no GPU here: its cards' links and MIG instances
are shown by tests/agentd/test_gpu_ready_cluster.py over recorded ones).
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.helpers import init_on_free_ports, llmgw, nodes_json, start, wait_until

NODE = "lab-1"


@pytest.fixture
def up(tmp_path):
    home = tmp_path / "home"
    init_on_free_ports(home, "--node", "--node-id", NODE, "--no-starter")
    proc = start(home, "up")
    try:
        wait_until(lambda: [n["state"] for n in nodes_json(home) or []] == ["ready"], timeout_s=60)
        yield home
    finally:
        proc.terminate()
        print(proc.communicate(timeout=30)[0])


def shown_json(home) -> dict | None:
    res = llmgw(home, "ctl", "node", "show", NODE, "--json", timeout_s=20)
    return json.loads(res.stdout) if res.returncode == 0 else None


def test_node_show_gives_the_memory_bandwidth_the_agent_measured(up):
    # Measured once after the agent registers, then carried by its heartbeats.
    view = wait_until(lambda: (v := shown_json(up)) and v["host"].get("mem_bandwidth_gbs") and v)
    assert view["node_id"] == NODE and view["host"]["mem_bandwidth_gbs"] > 0.1
    people = llmgw(up, "ctl", "node", "show", NODE, COLUMNS="200")
    assert people.returncode == 0, people.stderr
    assert f"{view['host']['mem_bandwidth_gbs']:.1f} GB/s (measured)" in people.stdout
