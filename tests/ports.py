"""TCP ports for the suite's servers, never the same one twice and never another worker's.

A port picked with ``bind(("127.0.0.1", 0))`` and released at once is only
free until someone else binds it: the kernel hands the same number to the
next caller, so two picks in a row could return one port (``the agent and
http ports are both 52807``), and a port picked by one test worker could be
picked by another before either server listens. Ports here come from a
block of their own per xdist worker, below the kernel's ephemeral range (so
no outgoing connection and no ``bind(0)`` of a product ever takes one),
handed out in turn, each checked to be bindable at that moment. A block is
walked round again only after all of it was given out, by when the servers
that held its first ports are long gone.
"""

from __future__ import annotations

import os
import socket
import threading

# Below Linux's default ephemeral range (32768–60999) and above the ports
# services usually own; split evenly between the workers.
FIRST_PORT = 15000
LAST_PORT = 32767

_lock = threading.Lock()
_next: int | None = None


def _worker_block() -> tuple[int, int]:
    """This process's ports: [first, last] of its worker's block."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (LAST_PORT - FIRST_PORT + 1) // max(workers, 1)
    first = FIRST_PORT + index * size
    return first, first + size - 1


def _bindable(address: str, port: int) -> bool:
    # As the servers themselves bind (asyncio, uvicorn, grpclib: SO_REUSEADDR),
    # so a port whose last connection is in TIME_WAIT counts as free.
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def free_port(address: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``address``, given to no one else in this run."""
    global _next
    first, last = _worker_block()
    with _lock:
        if _next is None or not first <= _next <= last:
            _next = first
        for _ in range(last - first + 1):
            port = _next
            _next = first if _next >= last else _next + 1
            if _bindable(address, port) and (address == "0.0.0.0" or _bindable("0.0.0.0", port)):
                return port
    raise RuntimeError(f"no free port left between {first} and {last}")


def free_ports(count: int, address: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports."""
    return [free_port(address) for _ in range(count)]
