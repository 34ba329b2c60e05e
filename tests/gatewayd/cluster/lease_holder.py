"""A tiny control plane for the real-process lease tests: it holds the leader lease on
PostgreSQL and logs, one JSON line each, every moment it acts as the leader.

    LEASE_HOLDER_DSN=postgresql://… python -m tests.gatewayd.cluster.lease_holder \
        --holder a --log a.jsonl

(The DSN travels in the environment: a DSN may carry a password.)

Lines: {"kind": "act" | "change" | "leader" | "started", "mono_ns", "real_ns", …}.
An "act" is stamped BEFORE held() is asked, so a stamp is a moment held()
said this process may act — the claim the test checks against the others'.
CLOCK_MONOTONIC is one clock for every process of a machine, so the stamps
of two processes compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import TextIO

from gatewayd.cluster import LeaderLease
from gatewayd.store import PostgresStore

# What a leader's work looks like here: a check of held() before each act.
ACT_EVERY_S = 0.02


async def main(args: argparse.Namespace, out: TextIO) -> None:

    def write(kind: str, mono_ns: int | None = None, **fields) -> None:
        line = {
            "kind": kind,
            "mono_ns": time.monotonic_ns() if mono_ns is None else mono_ns,
            "real_ns": time.clock_gettime_ns(time.CLOCK_REALTIME),
            **fields,
        }
        out.write(json.dumps(line) + "\n")

    store = PostgresStore(os.environ.pop("LEASE_HOLDER_DSN"))
    await store.open()
    lease = LeaderLease(store, args.holder, ttl_s=args.ttl_s, try_every_s=args.try_every_s)
    lease.on_change(lambda held: write("change", held=held, epoch=lease.epoch))
    loop = asyncio.create_task(lease.run())
    write("started")
    seen_leader = None
    while not loop.done():
        stamp = time.monotonic_ns()
        if lease.held():
            write("act", mono_ns=stamp, epoch=lease.epoch)
        if lease.leader_id != seen_leader:
            seen_leader = lease.leader_id
            write("leader", leader=seen_leader)
        await asyncio.sleep(ACT_EVERY_S)
    loop.result()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--holder", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--ttl-s", type=float, default=2.0)
    parser.add_argument("--try-every-s", type=float, default=0.2)
    args = parser.parse_args()
    with open(args.log, "a", buffering=1) as log_file:  # line-buffered: read while it runs
        asyncio.run(main(args, log_file))
