"""Building one heartbeat: GPU samples, free disk, available memory."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import psutil

from llmgw.inventory import sample_to_proto
from proto.llmgw.v1 import Heartbeat


def build_heartbeat(
    probe, data_dir: Path, seq: int, foreign_bytes: dict[int, int] | None = None
) -> Heartbeat:
    """Blocking (NVML, statvfs): call through asyncio.to_thread.

    ``foreign_bytes``: per GPU, memory held by processes that are not this
    node's engines (see ``foreign_gpu_bytes``).
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
    )


async def foreign_gpu_bytes(probe, supervisor) -> dict[int, int]:
    """Per GPU, bytes used by processes that do not descend from one of our shards."""
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
