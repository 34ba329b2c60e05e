"""Engine processes themselves: starting one, signalling its group, seeing it end.

An engine is started in a session (and so a process group) of its own, not
tied to the agent's life (no PR_SET_PDEATHSIG): the agent's own restart
leaves it serving, and the agent after it adopts it. A process the agent
adopted is not its child, so its end is seen through a pidfd (or, where the
kernel has none, by polling) rather than waitpid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess

import psutil

from agentd.supervisor.model import LaunchSpec
from agentd.supervisor.users import EngineUser
from llmgw.aio import within

# Taken from the agent's environment; nothing else is (the agent's own
# variables are no engine's business, and may hold secrets).
INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# psutil's start times come from clock ticks (10 ms): two readings of one
# process agree within a tick, and no other process gets its pid that fast.
START_TIME_TOLERANCE_S = 0.01


def engine_env(spec_env: dict[str, str], user: EngineUser) -> dict[str, str]:
    """The environment an engine starts with: a few of the agent's, then the spec's."""
    env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    env.update(spec_env)
    return env


def spawn(spec: LaunchSpec, user: EngineUser, output_fd: int) -> subprocess.Popen:
    """Start an engine (blocking: fork and exec) writing to ``output_fd``."""
    switch: dict = {}
    cwd = spec.cwd
    if user.uid is not None:
        switch = {"user": user.uid, "group": user.gid, "extra_groups": user.groups}
        # Not the agent's own directory, which may be closed to the engine
        # user (an engine that writes a file into its cwd would fail there).
        if cwd is None and os.path.isdir(user.home):
            cwd = user.home
    return subprocess.Popen(
        spec.argv,
        cwd=cwd,
        env=engine_env(spec.env, user),
        stdin=subprocess.DEVNULL,
        stdout=output_fd,
        stderr=output_fd,
        close_fds=True,
        start_new_session=True,
        **switch,
    )


def environ(pid: int) -> dict[str, str]:
    """The environment a running process was started with; {} when it cannot be read.

    What a restarted agent knows of an adopted engine's secrets: its state
    file keeps none.
    """
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


def start_time(pid: int) -> float | None:
    """A running process's start time; None when it is gone or a zombie."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except psutil.Error:
        return None


def same_process(pid: int, started: float) -> bool:
    """Whether ``pid`` is still the process that started at ``started``."""
    now = start_time(pid)
    return now is not None and abs(now - started) < START_TIME_TOLERANCE_S


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a whole process group; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a group (blocking: a walk of /proc)."""
    members = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc.pid)
        except ProcessLookupError:
            continue
    return members


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # an old kernel, or the process is already gone


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def wait_child(popen: subprocess.Popen, poll_interval_s: float) -> int:
    """Wait for a process this agent started to end, reap it, return its status."""
    fd = _pidfd(popen.pid)
    try:
        if fd is not None:
            await _readable(fd)
        while (code := popen.poll()) is None:
            await asyncio.sleep(poll_interval_s)
        return code
    finally:
        if fd is not None:
            os.close(fd)


async def wait_adopted(pid: int, started: float, poll_interval_s: float) -> int | None:
    """Wait for an adopted process to end; its status when this agent is its parent.

    An engine adopted by a restarted agent is init's child and its status is
    not ours to read (None). The pidfd is opened, then the start time checked
    again, so a pid reused in between is never waited on.
    """
    fd = _pidfd(pid)
    try:
        if fd is not None and same_process(pid, started):
            await _readable(fd)
        else:
            while same_process(pid, started):
                await asyncio.sleep(poll_interval_s)
    finally:
        if fd is not None:
            os.close(fd)
    # The agent that adopted a process it started itself (tests do) reaps it.
    with contextlib.suppress(ChildProcessError):
        reaped, status = os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks
        if reaped == pid:
            return os.waitstatus_to_exitcode(status)
    return None


def describe_exit(code: int | None) -> str:
    """How a process ended, in plain words."""
    if code is None:
        return "exited (its exit status is unknown: an earlier agent started it)"
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "a signal"
    words = f"was killed by {name} (signal {-code})"
    if -code == signal.SIGKILL:
        words += ", as the kernel's out-of-memory killer does"
    return words


async def terminate_group(
    pgid: int, exited: asyncio.Event, grace_s: float, *, kill_wait_s: float = 5.0
) -> str:
    """End a process group: SIGTERM, then SIGKILL to whatever is left after ``grace_s``.

    ``exited`` is set when the group's leader (the engine) has ended. Its
    children are waited for too: a worker that outlives its engine keeps
    the GPU memory the next replica needs. Returns how it went, in words.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await within(exited.wait(), grace_s)
    while loop.time() < deadline and await asyncio.to_thread(group_members, pgid):
        await asyncio.sleep(min(0.1, grace_s))
    if exited.is_set() and not await asyncio.to_thread(group_members, pgid):
        return "it exited on SIGTERM"
    signal_group(pgid, signal.SIGKILL)
    # A SIGKILLed process goes at once unless it is stuck in the kernel (a GPU
    # driver call), which no signal hurries.
    try:
        await within(exited.wait(), kill_wait_s)
    except TimeoutError:
        return f"SIGKILLed after {grace_s:g} s, but it has not exited yet"
    return f"it did not exit within {grace_s:g} s of SIGTERM and was SIGKILLed"
