"""How many pytest-xdist workers the suite runs on here: printed, for scripts/test.sh.

Two a core, because most tests wait on processes and sockets rather than
compute; at most one per 3 GiB of memory, because the end-to-end tests each
run a control plane, an agent and an engine (a real llama-server holds about
half a GiB); at least 2, at most 16.
"""

from __future__ import annotations

import os

GIB = 1024**3
PER_WORKER_BYTES = 3 * GIB


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * GIB


def workers(n_cores: int, mem_bytes: int) -> int:
    return max(2, min(2 * n_cores, mem_bytes // PER_WORKER_BYTES, 16))


if __name__ == "__main__":
    print(workers(cores(), memory_bytes()))
