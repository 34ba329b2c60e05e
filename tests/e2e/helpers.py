"""Running the real ``llmgw`` command as a user would, in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.ports import free_port

LLMGW = [sys.executable, "-m", "llmgw"]


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["LLMGW_HOME"] = str(home)
    env.pop("LLMGW_STORE_DSN", None)
    env.update(extra)
    return env


def llmgw(home: Path, *args: str, timeout_s: float = 60, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        LLMGW + list(args),
        env=env_for(home, **extra),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def start(home: Path, *args: str) -> subprocess.Popen:
    """``llmgw ARGS`` running in the background, its output kept (stdout and stderr together)."""
    return subprocess.Popen(
        LLMGW + list(args),
        env=env_for(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def init_on_free_ports(home: Path, *extra: str, **env) -> subprocess.CompletedProcess:
    ports = []
    for name in ("agent", "admin", "http", "metrics"):
        ports += [f"--{name}-port", str(free_port())]
    res = llmgw(home, "server", "init", "--host", "localhost", *ports, *extra, **env)
    assert res.returncode == 0, res.stderr
    return res


def nodes_json(home: Path) -> list[dict] | None:
    res = llmgw(home, "ctl", "nodes", "--json", timeout_s=20)
    if res.returncode != 0:
        return None
    return json.loads(res.stdout)["nodes"]  # the whole of stdout is the JSON reply


def wait_until(fn, *, timeout_s: float = 60, interval_s: float = 0.5):
    """Poll ``fn`` until it returns something truthy; a bound, not a timing assertion."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"gave up after {timeout_s} s waiting for {fn}")
