"""Building one heartbeat: GPU samples, free disk, available memory."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import psutil

from llmgw.inventory import sample_to_proto
from proto.llmgw.v1 import Heartbeat


def build_heartbeat(probe, data_dir: Path, seq: int) -> Heartbeat:
    """Blocking (NVML, statvfs): call through asyncio.to_thread."""
    try:
        disk_free = shutil.disk_usage(data_dir).free
    except OSError:
        disk_free = 0
    return Heartbeat(
        seq=seq,
        sent_unix_ms=int(time.time() * 1000),
        gpus=[sample_to_proto(s) for s in probe.sample()],
        disk_free_bytes=disk_free,
        memory_available_bytes=psutil.virtual_memory().available,
    )
