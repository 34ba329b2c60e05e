"""What the fault suite watches while a fault runs: who answers /leader, and what the store says.

``LeaderWatch`` asks every control plane's /leader ten times a second, all at
once, and keeps each round: two control planes answering 200 in one round
would be two leaders acting at once. A frozen or dead control plane answers
nothing, which is right: a process that cannot run cannot act. The store's
own record (``leader_changes``) says who took the lease from whom, when and
why; ``usage_counts`` reads the usage table for one key.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from tests.faults.harness.llmgw_cluster import LlmgwCluster

WATCH_EVERY_S = 0.1


@dataclass
class LeaderWatch:
    cluster: LlmgwCluster
    # (wall clock, the names answering /leader 200)
    rounds: list[tuple[float, frozenset[str]]] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            at = time.time()
            answers = await asyncio.gather(
                *(cp.probe("/leader") for cp in self.cluster.control_planes)
            )
            leading = frozenset(
                cp.name for cp, status in zip(self.cluster.control_planes, answers) if status == 200
            )
            self.rounds.append((at, leading))
            try:
                async with asyncio.timeout(WATCH_EVERY_S):
                    await stop.wait()
            except TimeoutError:
                pass

    def two_at_once(self) -> list[tuple[float, frozenset[str]]]:
        return [(at, names) for at, names in self.rounds if len(names) > 1]

    def first_leader_after(self, t: float, *, not_name: str | None = None) -> float | None:
        """When a control plane (other than ``not_name``) was first seen leading after ``t``."""
        for at, names in self.rounds:
            if at >= t and names and names != {not_name}:
                return at
        return None


@dataclass
class LeaderChange:
    holder: str
    previous: str
    at: datetime
    vacant_s: float | None
    reason: str


async def _connect(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, timeout=5)


async def leader_changes_since(dsn: str, since: datetime) -> list[LeaderChange]:
    conn = await _connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT holder, previous_holder, at, vacant_s, reason FROM leader_changes"
            " WHERE at >= $1 ORDER BY id",
            since,
        )
    finally:
        await conn.close()
    return [LeaderChange(r[0], r[1], r[2], r[3], r[4]) for r in rows]


async def usage_counts(dsn: str, key_id: str) -> dict[int, int]:
    """Usage rows of ``key_id`` by status."""
    conn = await _connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT status, count(*) FROM usage_rows WHERE key_id = $1 GROUP BY status", key_id
        )
    finally:
        await conn.close()
    return {r[0]: r[1] for r in rows}


async def batch_usage_counts(dsn: str, batch_id: str) -> dict[int, int]:
    """Usage rows metered for ``batch_id``'s requests, by status."""
    conn = await _connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT status, count(*) FROM usage_rows WHERE batch_id = $1 GROUP BY status",
            batch_id,
        )
    finally:
        await conn.close()
    return {r[0]: r[1] for r in rows}
