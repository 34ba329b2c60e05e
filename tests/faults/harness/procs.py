"""Processes the fault suite starts, each in a process group of its own, and waits on conditions.

Every server of the suite (etcd, Patroni and its PostgreSQL, HAProxy) runs as
a real process on loopback ports with config files under a temporary folder.
A ``Proc`` is started in a new session so that it, and whatever it forks
that stays in its group, can be signalled or killed as one; ``stop`` always
ends with SIGKILL, so nothing the suite started outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port  # noqa: F401  (the harness hands it on)

# A clean stop of any of these servers takes well under this.
STOP_GRACE_S = 15.0


class HarnessError(AssertionError):
    """Something the harness cannot wait out (a server exited): ``wait_until`` stops at once."""


def require_binaries(*paths: str) -> None:
    """Skip when a server is not installed; under CI=true that is a failure instead."""
    missing = [p for p in paths if not Path(p).exists()]
    if not missing:
        return
    message = (
        f"not installed here: {', '.join(missing)} (apt-get install -y patroni etcd-server haproxy)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; CI must run the fault suite")
    pytest.skip(message)


async def wait_until(
    condition: Callable[[], Any | Awaitable[Any]],
    *,
    timeout_s: float,
    interval_s: float = 0.1,
    what: str = "the condition",
) -> Any:
    """Poll ``condition`` (sync or async) until it returns something truthy; that value.

    An exception from the condition counts as "not yet" (a server still
    starting refuses connections); the last one is named if time runs out.
    """
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        try:
            value = condition()
            if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
                value = await value
            if value:
                return value
        except HarnessError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure means "not there yet"
            last = e
        if time.monotonic() >= deadline:
            because = f" (last: {type(last).__name__}: {last})" if last is not None else ""
            raise AssertionError(f"{what} did not happen within {timeout_s:.0f} s{because}")
        await asyncio.sleep(interval_s)


def _as_user(user: str | None) -> dict[str, Any]:
    if user is None or os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


@dataclass
class Proc:
    """One started server: its argv, its log file, its process."""

    name: str
    argv: list[str]
    log_path: Path
    user: str | None = None
    env: dict[str, str] | None = None
    cwd: Path | None = None
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)

    async def start(self) -> Proc:
        log = self.log_path.open("ab")
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
                cwd=self.cwd,
                **_as_user(self.user),
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process's whole group (it leads it: start_new_session)."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    async def wait(self, timeout_s: float) -> bool:
        """Whether it ended within ``timeout_s``."""
        if self.process is None:
            return True
        try:
            await asyncio.wait_for(self.process.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def kill(self) -> None:
        """SIGKILL the group at once, as a crash or a power cut would end it."""
        self.signal(signal.SIGKILL)
        await self.wait(STOP_GRACE_S)

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the process, then SIGKILL its group if it has not ended within ``grace_s``."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            if not await self.wait(grace_s):
                self.signal(signal.SIGKILL)
                await self.wait(STOP_GRACE_S)
        # Whatever stayed in its group (a child left behind) goes too.
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)


def kill_pid_file(path: Path, sig: int = signal.SIGKILL) -> bool:
    """Signal the process whose pid is the first line of ``path`` (postmaster.pid); whether sent."""
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
