"""A child that ``llmgw up`` names itself to ends when ``up`` is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil

# A stand-in for `up`: starts an armed child (the way up starts gatewayd), says its pid, waits.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    env = {**os.environ, "LLMGW_DIE_WITH": str(os.getpid())}
    child = subprocess.Popen(
        [sys.executable, "-c",
         "from llmgw.parent_death import arm; arm(); import time, sys; print('armed', flush=True);"
         " time.sleep(120)"],
        env=env, stdout=subprocess.PIPE, text=True,
    )
    assert child.stdout.readline().strip() == "armed"
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def test_an_armed_child_ends_when_its_parent_is_killed_outright():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running()
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        # The kernel sends SIGTERM at the parent's death: the bound is generous, not a timing.
        child.wait(timeout=30)
    finally:
        parent.kill()


def test_an_armed_child_whose_parent_is_already_gone_exits(monkeypatch):
    # A pid that is not this process's parent: as if up died before the child armed.
    env = {**os.environ, "LLMGW_DIE_WITH": str(os.getpid() + 1_000_000)}
    res = subprocess.run(
        [sys.executable, "-c", "from llmgw.parent_death import arm; arm(); print('went on')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0 and "went on" not in res.stdout


def test_unarmed_processes_and_their_children_are_left_alone():
    res = subprocess.run(
        [sys.executable, "-c", "from llmgw.parent_death import arm; arm(); print('went on')"],
        env={k: v for k, v in os.environ.items() if k != "LLMGW_DIE_WITH"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.stdout.strip() == "went on"
