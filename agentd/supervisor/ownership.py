"""Which shard a process belongs to: the rule, as pure functions, and a reader of the real table.

A GPU process is a shard's when it is the shard's process, is in the shard's
process group, or was started by it at any remove. The last case matters: an
engine that computes in a child of its own — one that even moves into a
group of its own — is still the shard, and counting its memory as someone
else's made a GPU replica look like a CPU one with its gigabytes "foreign".
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import psutil

# A chain of parents deeper than this is no engine's; the bound also keeps a
# table read while processes come and go (a loop in it) from walking forever.
MAX_ANCESTRY_DEPTH = 16


class ProcLink(NamedTuple):
    """A process's place in the tree: its parent and its process group."""

    ppid: int
    pgid: int


def descends(pid: int, ancestor: int, table: Mapping[int, ProcLink]) -> bool:
    """Whether ``pid`` was started, at any remove, by ``ancestor``.

    A process is not its own descendant. Walks at most MAX_ANCESTRY_DEPTH
    parents; a pid missing from the table ends the walk.
    """
    current = pid
    for _ in range(MAX_ANCESTRY_DEPTH):
        link = table.get(current)
        if link is None:
            return False
        current = link.ppid
        if current == ancestor:
            return True
        if current <= 1:
            return False
    return False


def owns(pid: int, shard_pid: int, shard_pgid: int, table: Mapping[int, ProcLink]) -> bool:
    """Whether process ``pid`` belongs to the shard whose process is ``shard_pid``."""
    if pid == shard_pid:
        return True
    link = table.get(pid)
    if shard_pgid > 1 and link is not None and link.pgid == shard_pgid:
        return True
    return descends(pid, shard_pid, table)


def owner_of(
    pid: int, shards: Mapping[str, tuple[int, int]], table: Mapping[int, ProcLink]
) -> str | None:
    """The shard id (of ``shards``: id → (pid, pgid)) that ``pid`` belongs to, if any."""
    for shard_id, (shard_pid, shard_pgid) in shards.items():
        if owns(pid, shard_pid, shard_pgid, table):
            return shard_id
    return None


def process_table() -> dict[int, ProcLink]:
    """Every process's parent and group, read now (blocking: a walk of /proc)."""
    table: dict[int, ProcLink] = {}
    for proc in psutil.process_iter(["ppid"]):
        try:
            ppid = proc.info["ppid"]
            pgid = os.getpgid(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue  # it ended between the listing and the read
        if ppid is not None:
            table[proc.pid] = ProcLink(ppid=ppid, pgid=pgid)
    return table


async def owners(pids: Iterable[int], shards: Mapping[str, tuple[int, int]]) -> dict[int, str]:
    """The shard each of ``pids`` belongs to; pids of no shard are left out."""
    wanted = list(pids)
    if not wanted or not shards:
        return {}
    table = await asyncio.to_thread(process_table)
    found: dict[int, str] = {}
    for pid in wanted:
        shard_id = owner_of(pid, shards, table)
        if shard_id is not None:
            found[pid] = shard_id
    return found
