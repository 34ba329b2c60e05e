"""Two real processes on one real PostgreSQL: the leader frozen by SIGSTOP for twice its
lease never acts alongside the control plane that took over, before or after SIGCONT.

Each process (tests/gatewayd/cluster/lease_holder.py) logs every moment its
held() said it may act, stamped by CLOCK_MONOTONIC, which both share.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gatewayd.store import PostgresStore

pytestmark = pytest.mark.postgres

TTL_S = 2.0
TRY_EVERY_S = 0.2
REPO = Path(__file__).resolve().parents[3]


def _spawn(dsn: str, holder: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.gatewayd.cluster.lease_holder",
            "--holder",
            holder,
            "--log",
            str(log),
            "--ttl-s",
            str(TTL_S),
            "--try-every-s",
            str(TRY_EVERY_S),
        ],
        cwd=REPO,
        env={**os.environ, "LEASE_HOLDER_DSN": dsn},
    )


def _lines(log: Path) -> list[dict]:
    if not log.exists():
        return []
    # The last line may be half-written while the process runs.
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


async def _until(what, condition, proc_a, proc_b, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return
        for proc in (proc_a, proc_b):
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"a lease holder exited ({proc.returncode}) before {what}")
        await asyncio.sleep(0.05)
    raise AssertionError(f"gave up waiting: {what}")


def _acts(log: Path) -> list[int]:
    return [line["mono_ns"] for line in _lines(log) if line["kind"] == "act"]


def _saw_leader(log: Path, leader: str) -> bool:
    return any(ln["kind"] == "leader" and ln["leader"] == leader for ln in _lines(log))


async def test_a_leader_frozen_for_twice_its_lease_never_acts_alongside_the_new_one(
    tmp_path, fresh_postgres_dsn
):
    migrated = PostgresStore(fresh_postgres_dsn)
    await migrated.open()  # once, before the two processes start
    a_log, b_log = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a = b = None
    try:
        a = _spawn(fresh_postgres_dsn, "a", a_log)
        await _until("a leads", lambda: _acts(a_log), a, b)
        b = _spawn(fresh_postgres_dsn, "b", b_log)
        await _until("b sees a lead", lambda: _saw_leader(b_log, "a"), a, b)

        os.kill(a.pid, signal.SIGSTOP)
        stopped_ns = time.monotonic_ns()
        await _until("b takes over", lambda: _acts(b_log), None, b)
        # Keep a frozen for twice its lease in all (the fault), then let it run.
        await asyncio.sleep(max(0.0, 2 * TTL_S - (time.monotonic_ns() - stopped_ns) / 1e9))
        # Stamped before SIGCONT: a may run (and log) before os.kill returns here.
        resumed_ns = time.monotonic_ns()
        os.kill(a.pid, signal.SIGCONT)
        await _until("a sees b lead", lambda: _saw_leader(a_log, "b"), a, b)
        # b goes on acting after a resumed: the window where both might act is in the logs.
        await _until(
            "b acts after a resumed",
            lambda: any(t > resumed_ns + 1_000_000_000 for t in _acts(b_log)),
            a,
            b,
        )
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()  # SIGKILL ends a stopped process too
                proc.wait()
        changes = await migrated.leader_changes("leader")
        await migrated.close()

    a_acts, b_acts = _acts(a_log), _acts(b_log)
    # The intervals of leading never overlap: every act of a comes before every act of b,
    # and a never acted again after it resumed.
    assert a_acts and b_acts
    assert max(a_acts) < min(b_acts)
    assert max(a_acts) <= stopped_ns
    merged = sorted([(t, "a") for t in a_acts] + [(t, "b") for t in b_acts])
    switches = sum(1 for x, y in itertools.pairwise(merged) if x[1] != y[1])
    assert switches == 1

    # b took over within the lease plus one try after a froze. (+1 s: two
    # processes' event loops on a shared 2-core machine; the rule is ttl + try.)
    took_over_s = (min(b_acts) - stopped_ns) / 1e9
    print(f"takeover after SIGSTOP: {took_over_s:.2f} s (lease {TTL_S} s)")
    assert took_over_s <= TTL_S + TRY_EVERY_S + 1.0

    # a learned it had lost only after it resumed; it had stopped acting long before.
    a_changes = [ln for ln in _lines(a_log) if ln["kind"] == "change"]
    assert [c["held"] for c in a_changes] == [True, False]
    assert a_changes[1]["mono_ns"] >= resumed_ns
    b_changes = [ln for ln in _lines(b_log) if ln["kind"] == "change"]
    assert [c["held"] for c in b_changes] == [True]

    assert [(c.epoch, c.holder, c.previous_holder, c.reason) for c in changes] == [
        (2, "b", "a", "expired"),
        (1, "a", "", "acquired"),
    ]
