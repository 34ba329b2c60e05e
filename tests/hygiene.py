"""After the run: nothing of the suite left running, no folder of its own left in /tmp.

A test that ends leaves its processes behind when a fixture forgets one (an
agent's engine, restarted after a failure and not yet known to the control
plane, was seen running, parent 1, after a whole run). Once the run is over
(the controller of pytest-xdist, or the one process), every orphaned process
this run started is named in the summary and stopped: those whose
environment carries this run's ``LLMGW_TEST_RUN`` (set here, inherited by the
workers and what they start), and engines of this checkout, which start with
an environment of their own (a process carrying another run's mark is that
run's, never ours). ``/tmp/llmgw-*`` folders made during the run and still
there are named, not removed: a run beside this one may own them. With
``LLMGW_TEST_LEFTOVERS=fail`` a leftover also fails the run.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
# Kept between runs on purpose: the assembled test model, built wheelhouses.
KEPT = ("llmgw-test-models", "llmgw-test-wheelhouse-")
# A leftover given SIGTERM and this long is stopped with SIGKILL.
GRACE_S = 5.0
CLOCK_SLACK_S = 2.0

RUN_ENV = "LLMGW_TEST_RUN"
# Made once, in the first process (the controller); its workers inherit it.
RUN_ID = os.environ.setdefault(RUN_ENV, f"{os.getpid()}-{time.time_ns()}")

_started_at: float | None = None


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def _ours(proc: psutil.Process) -> bool:
    try:
        run = proc.environ().get(RUN_ENV)
        cmdline = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    if run is not None:
        return run == RUN_ID
    # An engine: started with only the few variables an agent passes on. Never
    # a test run of its own (another pytest on this checkout, or the `timeout`
    # wrapping one, orphaned by the shell that started it): that run is not ours.
    return str(ROOT) in cmdline and "pytest" not in cmdline


def leftovers(since: float) -> list[psutil.Process]:
    """Orphaned processes of the suite started after ``since``."""
    # A process's start time is counted from the boot time in whole seconds
    # (/proc/stat btime): it can read up to a second early.
    since -= CLOCK_SLACK_S
    found = []
    for proc in psutil.process_iter(["ppid", "create_time"]):
        try:
            if proc.info["ppid"] != 1 or proc.info["create_time"] < since:
                continue
        except (psutil.NoSuchProcess, KeyError):
            continue
        if proc.pid != os.getpid() and _ours(proc):
            found.append(proc)
    return found


def stale_folders(since: float) -> list[Path]:
    out = []
    for entry in Path("/tmp").glob("llmgw-*"):
        if entry.name.startswith(KEPT):
            continue
        try:
            if entry.stat().st_mtime >= since:
                out.append(entry)
        except OSError:
            continue
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    global _started_at
    if _is_controller(session.config):
        _started_at = time.time()


def _stop(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=GRACE_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _started_at is None or not _is_controller(session.config):
        return
    # A process stopped by the last fixture may still be on its way out.
    deadline = time.monotonic() + GRACE_S
    procs = leftovers(_started_at)
    while procs and time.monotonic() < deadline:
        time.sleep(0.2)
        procs = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    folders = stale_folders(_started_at)
    if not procs and not folders:
        return
    lines = []
    for proc in procs:
        try:
            lines.append(f"  process {proc.pid}: {' '.join(proc.cmdline())[:200]}")
        except psutil.Error:
            continue
    lines += [f"  folder {f} (left in place)" for f in folders]
    _stop(procs)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    text = "left behind by the run (processes now stopped):\n" + "\n".join(lines)
    if reporter is not None:
        reporter.write_sep("!", "left behind")
        reporter.write_line(text)
    if os.environ.get("LLMGW_TEST_LEFTOVERS") == "fail" and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
