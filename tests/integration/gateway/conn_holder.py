"""A client that holds as many half-sent requests as its open-files limit allows.

    python -m tests.integration.gateway.conn_holder HOST PORT --source 127.0.0.2

What took gatewayd down once (issue 12): connections that send the start of a
request's headers and never the rest. It raises its soft open-files limit to
the hard one, opens connections from ``--source`` until ``socket()`` fails
for want of descriptors (or ports), and whenever the server closes one it opens
another, keeping the pressure on. It prints one JSON line ``{"holding": …}``
once it has used its whole budget, then on a line (or EOF) on stdin stops
opening, waits up to ``--drain-s`` for the server to close every connection
it still holds, and prints a JSON summary. A plain selector loop: one process,
no asyncio, so it costs the machine little beside what it asks of the server.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import resource
import selectors
import socket
import sys
import time
from pathlib import Path

# The start of a request, never finished: no blank line ends its headers.
HALF_REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: app"
# Descriptors the holder keeps for itself (stdio, the selector, Python's own).
SPARE_FDS = 16
_OUT_OF = {errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.EADDRINUSE, errno.ENOBUFS}


def _raise_limit() -> int:
    """The soft open-files limit raised to the hard one, as far as one source address has ports."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    # Where the limit is larger (root in CI may have a million), the ports one
    # source address may use to one server port bound the holder first.
    try:
        ports = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        low, high = map(int, ports.split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return min(soft, high - low - 1000)


class Holder:
    def __init__(self, target: tuple[str, int], source: str, limit: int):
        self.target = target
        self.source = source
        self.budget = limit - SPARE_FDS
        self.sel = selectors.DefaultSelector()
        self.opening = 0
        self.held: dict[socket.socket, float] = {}  # established -> when
        self.attempts = 0
        self.established = 0
        self.refused_at_connect = 0
        self.closed_by_server = 0
        self.longest_held_s = 0.0
        self.out_of_fds = 0
        self.told = False  # a line (or EOF) on stdin: stop opening

    def open_one(self) -> bool:
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError as e:
            if e.errno in _OUT_OF:
                self.out_of_fds += 1
                return False
            raise
        try:
            s.setblocking(False)
            s.bind((self.source, 0))
            err = s.connect_ex(self.target)
        except OSError as e:
            s.close()
            if e.errno in _OUT_OF:
                self.out_of_fds += 1
                return False
            raise
        if err not in (0, errno.EINPROGRESS):
            s.close()
            self.refused_at_connect += 1
            return True
        self.attempts += 1
        self.opening += 1
        self.sel.register(s, selectors.EVENT_WRITE, "connecting")
        return True

    def in_use(self) -> int:
        return self.opening + len(self.held)

    def fill(self) -> None:
        # All at once, as an attacker would: the kernel's queues drop and retry what they must.
        while self.in_use() < self.budget:
            if not self.open_one():
                break

    def step(self, timeout_s: float) -> None:
        for key, _ in self.sel.select(timeout_s):
            s, state = key.fileobj, key.data
            if state == "stdin":
                self.told = True
            elif state == "connecting":
                self.opening -= 1
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    self.sel.unregister(s)
                    s.close()
                    self.refused_at_connect += 1
                    continue
                try:
                    s.send(HALF_REQUEST)
                except OSError:
                    self.sel.unregister(s)
                    s.close()
                    self.closed_by_server += 1
                    continue
                self.established += 1
                self.held[s] = time.monotonic()
                self.sel.modify(s, selectors.EVENT_READ, "held")
            else:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""  # reset: closed by the server all the same
                if data:
                    continue  # an answer (a 408 or 400) before the close
                since = self.held.pop(s)
                self.longest_held_s = max(self.longest_held_s, time.monotonic() - since)
                self.closed_by_server += 1
                self.sel.unregister(s)
                s.close()

    def summary(self) -> dict:
        return {
            "budget": self.budget,
            "attempts": self.attempts,
            "established": self.established,
            "refused_at_connect": self.refused_at_connect,
            "closed_by_server": self.closed_by_server,
            "still_open": len(self.held),
            "still_opening": self.opening,
            "longest_held_s": round(self.longest_held_s, 3),
            "out_of_fds": self.out_of_fds,
        }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--source", default="127.0.0.2", help="the address connections come from")
    p.add_argument("--drain-s", type=float, default=30.0)
    p.add_argument("--max-s", type=float, default=120.0, help="stop by itself after this long")
    args = p.parse_args()
    holder = Holder((args.host, args.port), args.source, _raise_limit())
    os.set_blocking(sys.stdin.fileno(), False)
    holder.sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    announced = False
    stop_at = time.monotonic() + args.max_s
    while not holder.told and time.monotonic() < stop_at:
        holder.fill()
        if not announced and (holder.attempts >= holder.budget or holder.out_of_fds):
            print(json.dumps({"holding": holder.in_use(), **holder.summary()}), flush=True)
            announced = True
        holder.step(0.05)
    holder.sel.unregister(sys.stdin.fileno())
    # Stop opening; every connection still held must be closed by the server.
    deadline = time.monotonic() + args.drain_s
    while (holder.held or holder.opening) and time.monotonic() < deadline:
        holder.step(0.1)
    print(json.dumps(holder.summary()), flush=True)


if __name__ == "__main__":
    main()
