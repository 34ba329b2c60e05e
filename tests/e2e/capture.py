"""Every frame on one interface while a block runs, read with a raw AF_PACKET socket (root).

What a packet capture of the wire would show: a test asserts what is, and what
is not, in the bytes that crossed it (``Capture.data``), and which TCP ports
they were carried on.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

ETH_P_ALL = 0x0003


@dataclass
class Capture:
    frames: list[bytes] = field(default_factory=list)

    @property
    def data(self) -> bytes:
        return b"".join(self.frames)

    def tcp_ports(self) -> set[int]:
        """The TCP ports (either end) of the IPv4 frames seen."""
        ports: set[int] = set()
        for f in self.frames:
            if len(f) < 14 + 20 + 4 or f[12:14] != b"\x08\x00" or f[14 + 9] != 6:
                continue
            ihl = (f[14] & 0x0F) * 4
            src, dst = struct.unpack("!HH", f[14 + ihl : 14 + ihl + 4])
            ports |= {src, dst}
        return ports


@contextlib.contextmanager
def capture(interface: str) -> Iterator[Capture]:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((interface, 0))
    got = Capture()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            ready, _, _ = select.select([sock], [], [], 0.1)
            if ready:
                got.frames.append(sock.recv(65535))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield got
    finally:
        stop.set()
        reader.join(5)
        sock.close()
