"""Building one heartbeat: GPU samples, free disk, available memory."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import psutil

from llmgw.inventory import sample_to_proto
from proto.llmgw.v1 import Heartbeat


def build_heartbeat(
    probe,
    data_dir: Path,
    seq: int,
    foreign_bytes: dict[int, int] | None = None,
    mem_bandwidth_gbs: float = 0.0,
) -> Heartbeat:
    """Blocking (NVML, statvfs): call through asyncio.to_thread.

    ``foreign_bytes``: per GPU, memory held by processes that are not this
    node's engines (see ``foreign_gpu_bytes``). ``mem_bandwidth_gbs``: the
    host's measured figure once known (0 until then: the control plane keeps
    the last one it had).
    """
    try:
        disk_free = shutil.disk_usage(data_dir).free
    except OSError:
        disk_free = 0
    gpus = [sample_to_proto(s) for s in probe.sample()]
    for g in gpus:
        g.memory_foreign_bytes = (foreign_bytes or {}).get(g.index, 0)
    return Heartbeat(
        seq=seq,
        sent_unix_ms=int(time.time() * 1000),
        gpus=gpus,
        disk_free_bytes=disk_free,
        memory_available_bytes=psutil.virtual_memory().available,
        mem_bandwidth_gbs=mem_bandwidth_gbs,
    )


async def foreign_gpu_bytes(probe, supervisor) -> dict[int, int]:
    """Per GPU, bytes used by processes that do not descend from one of our shards.

    Where the probe lists them (NVML's compute and graphics processes, the
    fake probe's directory); a GPU it cannot list counts nothing foreign.
    """
    import asyncio

    read = getattr(probe, "processes", None)
    if read is None:
        return {}
    procs = await asyncio.to_thread(read)
    if not procs:
        return {}
    owners = await supervisor.owners({pid for entries in procs.values() for pid, _ in entries})
    return {
        index: sum(used for pid, used in entries if pid not in owners)
        for index, entries in procs.items()
    }
