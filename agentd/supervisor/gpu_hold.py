"""Whether a GPU shard runs on its cards: its processes hold memory on exactly those.

An engine that answers its health check is not yet a GPU replica: a
llama.cpp whose CUDA or Vulkan backend failed to load falls back to the CPU
without an error and answers all the same, slowly. So a shard given cards is
ready only when its process tree (its pid and every descendant, as
ownership.py says) holds memory on each card it was given and on no other.
The rule is pure (``verdict``); ``look`` reads the probe and /proc.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agentd.supervisor.ownership import ProcLink, owns, process_table

# Unit index -> (pid, bytes used) of the processes on it (a probe's ``processes``).
GpuProcesses = dict[int, list[tuple[int, int]]]
ReadProcesses = Callable[[], GpuProcesses]


def _units(units: Sequence[int], joiner: str) -> str:
    """ "GPU 0", "GPU 0 and 1", "GPU 0, 1 or 2"."""
    names = [str(u) for u in sorted(units)]
    if len(names) <= 1:
        return "GPU " + "".join(names)
    return f"GPU {', '.join(names[:-1])} {joiner} {names[-1]}"


def all_of(units: Sequence[int]) -> str:
    return _units(units, "and")


def any_of(units: Sequence[int]) -> str:
    return _units(units, "or")


def held_by(
    procs: Mapping[int, list[tuple[int, int]]],
    shard_pid: int,
    shard_pgid: int,
    table: Mapping[int, ProcLink],
) -> dict[int, int]:
    """Unit -> bytes the shard's processes hold there (units where they hold nothing left out)."""
    held: dict[int, int] = {}
    for unit, entries in procs.items():
        mine = [used for pid, used in entries if owns(pid, shard_pid, shard_pgid, table)]
        if mine:
            held[unit] = sum(mine)
    return held


@dataclass(frozen=True)
class Hold:
    """What a shard's processes hold, judged against the cards it was given.

    ``ready``: it holds on every card given and no other. ``wrong``: words
    for a failure now (memory on a card it was not given). Otherwise it is
    waiting: ``waiting`` says so while the startup deadline runs, ``failed``
    once it has passed.
    """

    ready: bool
    words: str = ""
    wrong: str = ""
    waiting: str = ""
    failed: str = ""


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def verdict(given: Sequence[int], held: Mapping[int, int], listed: Sequence[int]) -> Hold:
    """Judge ``held`` (unit -> bytes) against the ``given`` units.

    ``listed``: the units whose processes the probe could list; a given unit
    it cannot list is not held against the shard (nothing could show it).
    """
    given_set, listed_set = set(given), set(listed)
    elsewhere = sorted(set(held) - given_set)
    if elsewhere:
        return Hold(
            ready=False,
            wrong=f"its processes hold memory on {all_of(elsewhere)}, which it was not given "
            f"(it was given {all_of(given)})",
        )
    checkable = sorted(given_set & listed_set)
    missing = [u for u in checkable if u not in held]
    if not missing:
        if not checkable:
            return Hold(
                ready=True,
                words=f"the processes on {all_of(given)} cannot be listed, so where it runs "
                "is not checked",
            )
        total = sum(held.values())
        return Hold(ready=True, words=f"holds {_gib(total)} on {all_of(checkable)}")
    if len(missing) == len(checkable):
        return Hold(
            ready=False,
            waiting=f"its processes hold no memory on {any_of(missing)} yet",
            failed=f"runs on the CPU: its processes hold no memory on {any_of(missing)}",
        )
    on = sorted(held)
    return Hold(
        ready=False,
        waiting=f"its processes hold memory on {all_of(on)} but not yet on {any_of(missing)}",
        failed=f"its processes hold memory on {all_of(on)} but none on {any_of(missing)}",
    )


async def look(read: ReadProcesses, given: Sequence[int], shard_pid: int, shard_pgid: int) -> Hold:
    """Read the probe's processes and the process table now, and judge (blocking parts in threads)."""
    procs = await asyncio.to_thread(read)
    table = await asyncio.to_thread(process_table)
    return verdict(given, held_by(procs, shard_pid, shard_pgid, table), list(procs))
