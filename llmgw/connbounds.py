"""Connections counted per client address, against a bound: the piece every port of ours shares.

One client holding 19,990 half-sent requests once took the gateway down
(gatewayd/http/guard.py tells it); the mirror, with only a process-wide bound,
could be filled by one client the same way. Each server counts its open
connections here by client (``AddressCounts``) and resets one past the bound
at once (``reset``): its descriptor is free again within the same loop
iteration, and the client learns at once.

A client is its IPv4 address, or its IPv6 /64 (one host can hold all of it),
or "local" for a unix socket (``client_key``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
from collections.abc import Iterable

# Connections one client may hold open on a port: far past what a browser (6),
# pip or huggingface_hub (10) or a busy service's pool opens, well below what
# would let one client crowd out the rest.
MAX_PER_ADDRESS = 256
# A refused or late connection is reset (SO_LINGER 0): no FIN handshake and no
# TIME_WAIT entry are kept for a client that is holding the port down.
_LINGER_RESET = struct.pack("ii", 1, 0)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def client_key(peer) -> str:
    """What one client is counted as: its IPv4 address, its IPv6 /64, or "local"."""
    if not isinstance(peer, tuple) or not peer:
        return "local"  # a unix socket: this machine
    host = peer[0]
    if ":" not in host:
        return host
    if host.startswith("::ffff:") and "." in host:
        return host[7:]  # an IPv4 client on a dual-stack socket
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_network(f"{host.split('%')[0]}/64", strict=False))
    return host


def reset(transport) -> None:
    """Close a connection at once, with a reset rather than a FIN."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    transport.abort()


def reset_socket(sock: socket.socket) -> None:
    """``reset`` for a socket no transport was made for."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    sock.close()


class AddressCounts(dict[str, int]):
    """Open connections by client (a dict of client → count), each held to ``max_per_address``.

    An entry goes when its count reaches 0, so the table never holds more
    entries than there are connections.
    """

    def __init__(self, max_per_address: int = MAX_PER_ADDRESS) -> None:
        super().__init__()
        self.max_per_address = max_per_address

    def take(self, key: str) -> bool:
        """Count one more connection of ``key``; False (nothing counted) past the bound."""
        held = self.get(key, 0)
        if held >= self.max_per_address:
            return False
        self[key] = held + 1
        return True

    def release(self, key: str) -> None:
        held = self.pop(key, 1) - 1
        if held > 0:
            self[key] = held

    def held(self, key: str) -> int:
        """The connections ``key`` holds now."""
        return self.get(key, 0)


class TrustedProxies:
    """The networks whose word on the client address is believed."""

    def __init__(self, cidrs: Iterable[str] = ()) -> None:
        nets: list[Network] = []
        for cidr in cidrs:
            try:
                nets.append(ipaddress.ip_network(cidr.strip(), strict=False))
            except ValueError as exc:
                raise ValueError(
                    f"trusted_proxies: {cidr!r} is not an address or CIDR (e.g. 10.0.0.0/8)"
                ) from exc
        self.networks = tuple(nets)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, host: str | None) -> bool:
        if not host or not self.networks:
            return False
        try:
            addr = ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self.networks)
