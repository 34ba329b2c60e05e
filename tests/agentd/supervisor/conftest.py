"""A harness for the supervisor's tests: real processes, always cleaned up.

Engines are ``fake_engine.py`` (copied into the test's tmp_path), started by
real Supervisors; every process group an event or a test names is SIGKILLed
when the test ends, pass or fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from agentd.supervisor import LaunchSpec, ShardEvent, Supervisor
from tests.ports import free_port

# Tests run engines as whoever runs the tests: an engine user could not
# read a script under a root-only tmp_path (one test covers the switch).
ME = pwd.getpwuid(os.geteuid()).pw_name
FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


def gone(pid: int) -> bool:
    """Whether a process has ended (a zombie waiting for its parent has)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def eventually(check: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"{what} (waited {timeout_s:g} s)")
        await asyncio.sleep(0.02)


class Events(list[ShardEvent]):
    """The events one supervisor reported, in order."""

    def states(self, shard_id: str = "s1") -> list[str]:
        return [e.state for e in self if e.shard_id == shard_id]

    def last(self, shard_id: str = "s1") -> ShardEvent:
        return [e for e in self if e.shard_id == shard_id][-1]


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.state_dir = tmp_path / "agent" / "shards"
        self.output_dir = tmp_path / "agent" / "output"
        self.engine = tmp_path / "fake_engine.py"
        shutil.copy(FAKE_ENGINE, self.engine)
        self.supervisors: list[Supervisor] = []
        self.groups: set[int] = set()

    def supervisor(self, **options) -> tuple[Supervisor, Events]:
        """A new Supervisor on the harness's directories, as a restarted agent makes."""
        events = Events()

        def record(event: ShardEvent) -> None:
            events.append(event)
            if event.pid:
                self.groups.add(event.pid)

        options.setdefault("run_as", ME)
        options.setdefault("poll_interval_s", 0.05)
        sup = Supervisor(self.state_dir, self.output_dir, record, **options)
        self.supervisors.append(sup)
        return sup, events

    def spec(
        self, *engine_args: str, shard_id: str = "s1", deadline_s: float = 10.0, **fields
    ) -> LaunchSpec:
        """A LaunchSpec for the fake engine serving /health on a free port."""
        port = free_port()
        argv = [sys.executable, str(self.engine), "--port", str(port), *engine_args]
        return LaunchSpec(
            shard_id=shard_id, replica_id=f"r-{shard_id}", argv=argv,
            health_url=f"http://127.0.0.1:{port}/health", port=port,
            startup_deadline_s=deadline_s, **fields,
        )  # fmt: skip

    def track(self, pgid: int) -> None:
        self.groups.add(pgid)

    async def cleanup(self) -> None:
        for sup in self.supervisors:
            for info in sup.running():
                if info.pgid:
                    self.groups.add(info.pgid)
            await sup.close()
        for pgid in self.groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        await asyncio.sleep(0.05)
        for pgid in self.groups:  # reap those that were this process's children
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pgid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks


@pytest.fixture
async def harness(tmp_path):
    h = Harness(tmp_path)
    try:
        yield h
    finally:
        await h.cleanup()
