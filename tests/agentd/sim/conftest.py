"""The sim engine started as a real subprocess, as the agent starts it."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

START_TIMEOUT_S = 15.0


@dataclass
class RunningSim:
    proc: subprocess.Popen
    base_url: str

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"


def start_sim(*args: str, env: dict[str, str] | None = None) -> RunningSim:
    """``python -m agentd.sim --port 0 ...``, once it says where it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd.sim", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if "serving" in line:
                return RunningSim(proc, line.rsplit(" on ", 1)[1].strip())
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"the sim did not start: {proc.stderr.read()}")


def stop_sim(sim: RunningSim) -> int:
    if sim.proc.poll() is None:
        sim.proc.terminate()
    try:
        return sim.proc.wait(timeout=10)
    finally:
        sim.proc.stdout.close()
        sim.proc.stderr.close()


@pytest.fixture
def sim_factory() -> Iterator:
    started: list[RunningSim] = []

    def factory(*args: str, env: dict[str, str] | None = None) -> RunningSim:
        sim = start_sim(*args, env=env)
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        stop_sim(sim)


@pytest.fixture
def sim(sim_factory) -> RunningSim:
    """A quick sim: 8 tokens, 5 ms to the first, 1 ms between."""
    return sim_factory("--model", "sim-model", "--tokens", "8", "--ttft-ms", "5", "--itl-ms", "1")
