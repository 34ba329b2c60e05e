"""How fast this machine's memory moves: measured once per agent, for CPU speed estimates.

A token on the CPU reads every weight it uses once, so how fast a model
answers on a node's CPUs is about its memory rate over the model's bytes
(llmgw/modelplan/bandwidth.py turns one into the other). The figure is
measured, not looked up: the same CPU gives half the rate with half its
memory channels filled.

Every CPU copies its share of a buffer far larger than the caches, the best
of a few passes, in a fraction of a second. numpy's copies let go of the
GIL, so the threads run side by side. Blocking: call through
``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

log = logging.getLogger(__name__)

PASSES = 4
# Past every last-level cache by far, and small enough to fill in ~100 ms.
MIN_BUFFER_BYTES = 64 * 2**20
MAX_BUFFER_BYTES = 512 * 2**20
CACHE_MULTIPLE = 8
# Never more than this share of what is free: an agent must not push a
# serving node's engines into swap to measure it.
MAX_SHARE_OF_FREE = 8
MAX_THREADS = 64


def _last_level_cache_bytes() -> int:
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(name)
        except (ValueError, OSError):
            continue
        if size and size > 0:
            return size
    return 0


def buffer_bytes(available_bytes: int, cache_bytes: int) -> int:
    """The buffer to copy: 8× the last-level cache, within 64–512 MiB and 1/8 of free memory."""
    size = max(MIN_BUFFER_BYTES, CACHE_MULTIPLE * cache_bytes)
    size = min(size, MAX_BUFFER_BYTES, available_bytes // MAX_SHARE_OF_FREE)
    return max(size, 0)


def measure_gbs(*, size_bytes: int | None = None, passes: int = PASSES) -> float:
    """Memory bandwidth in GB/s (bytes read plus bytes written, as STREAM's copy counts).

    0.0 when it cannot be measured (too little free memory, no numpy).
    """
    try:
        import numpy as np
    except ImportError:
        log.info("memory bandwidth not measured: numpy is not installed")
        return 0.0
    if size_bytes is None:
        size_bytes = buffer_bytes(psutil.virtual_memory().available, _last_level_cache_bytes())
    if size_bytes < 2**20:
        log.info("memory bandwidth not measured: too little free memory")
        return 0.0
    try:
        threads = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        threads = os.cpu_count() or 1
    threads = max(1, min(threads, MAX_THREADS))
    src = np.empty(size_bytes, dtype=np.uint8)
    dst = np.empty_like(src)
    # Touch every page first: a fresh allocation is mapped on first write,
    # which would be timed as memory bandwidth otherwise.
    src.fill(1)
    dst.fill(0)
    step = -(-size_bytes // threads)
    parts = [(a, min(a + step, size_bytes)) for a in range(0, size_bytes, step)]

    def copy(part: tuple[int, int]) -> None:
        a, b = part
        np.copyto(dst[a:b], src[a:b])

    best_s = float("inf")
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        for _ in range(passes):
            started = time.perf_counter()
            list(pool.map(copy, parts))
            best_s = min(best_s, time.perf_counter() - started)
    gbs = 2 * size_bytes / best_s / 1e9 if best_s > 0 else 0.0
    log.info(
        "memory bandwidth: %.1f GB/s (%d MiB copied by %d threads, best of %d)",
        gbs,
        size_bytes >> 20,
        len(parts),
        passes,
    )
    return round(gbs, 1)
