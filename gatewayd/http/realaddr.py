"""The real client address of a connection that came through a trusted proxy.

Behind HAProxy every connection's peer is the proxy, so the per-address bound
(llmgw/connbounds.py) would count all clients as one, and one tenant could fill
the 256 connections for everyone. The proxy says who the client is, either in
a PROXY protocol header (v1 text or v2 binary) sent before the first byte of
the connection, or in ``X-Forwarded-For``. Either is believed only from a peer
in ``trusted_proxies``: anyone else could name any address they like.

This module is the pure part: parsing a PROXY header, and reading the client
out of ``X-Forwarded-For``. No I/O.
"""

from __future__ import annotations

import ipaddress
import struct

from llmgw.connbounds import TrustedProxies

__all__ = [
    "ProxyHeaderError",
    "TrustedProxies",
    "client_from_forwarded_for",
    "parse_proxy_header",
]

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
# The longest v1 line the spec allows, CRLF included.
V1_MAX_BYTES = 107
_V2_HEADER = struct.Struct("!12sBBH")
_V2_FAMILIES = {
    0x11: (4, ipaddress.IPv4Address),
    0x12: (4, ipaddress.IPv4Address),
    0x21: (16, ipaddress.IPv6Address),
    0x22: (16, ipaddress.IPv6Address),
}


class ProxyHeaderError(ValueError):
    """A connection from a trusted proxy did not start with a PROXY header we can read."""


def client_from_forwarded_for(
    peer_host: str | None, header: str | None, trusted: TrustedProxies
) -> str | None:
    """The client an ``X-Forwarded-For`` names, or None where it is not to be believed.

    The header is read only when the peer itself is a trusted proxy; it is
    walked from the right (the entries our own proxies appended) past every
    trusted hop, and the first untrusted entry is the client. An entry that is
    not an address ends the walk: nothing left of it can be trusted.
    """
    if not header or not trusted.trusts(peer_host):
        return None
    hops = [h.strip() for h in header.split(",") if h.strip()]
    client = None
    for hop in reversed(hops):
        host = _strip_port(hop)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            break
        client = host
        if not trusted.trusts(host):
            break
    return client


def _strip_port(hop: str) -> str:
    if hop.startswith("["):  # [v6]:port
        return hop[1 : hop.find("]")] if "]" in hop else hop
    if hop.count(":") == 1:  # v4:port
        return hop.split(":")[0]
    return hop


def parse_proxy_header(data: bytes) -> tuple[tuple[str, int] | None, int] | None:
    """Read a PROXY protocol header at the start of ``data``.

    Returns None while more bytes are needed, else ``(source, consumed)``:
    ``source`` is the client's (host, port), or None for a header that names
    none (v1 ``UNKNOWN``, v2 ``LOCAL`` — the proxy's own health checks), and
    ``consumed`` the bytes the header took. Raises ProxyHeaderError for bytes
    that are no PROXY header.
    """
    if data[:1] == b"\r":
        if len(data) < len(V2_SIGNATURE):
            if not V2_SIGNATURE.startswith(data):
                raise ProxyHeaderError("not a PROXY protocol header")
            return None
        if data.startswith(V2_SIGNATURE):
            return _parse_v2(data)
        raise ProxyHeaderError("not a PROXY protocol header")
    if not b"PROXY ".startswith(data[:6]):
        raise ProxyHeaderError("not a PROXY protocol header")
    end = data.find(b"\r\n", 0, V1_MAX_BYTES)
    if end < 0:
        if len(data) >= V1_MAX_BYTES:
            raise ProxyHeaderError("PROXY v1 line longer than 107 bytes")
        return None
    return _parse_v1(data[:end].decode("ascii", "replace")), end + 2


def _parse_v1(line: str) -> tuple[str, int] | None:
    parts = line.split(" ")
    if len(parts) >= 2 and parts[1] == "UNKNOWN":
        return None
    if len(parts) != 6 or parts[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"unreadable PROXY v1 line: {line[:60]!r}")
    try:
        src = ipaddress.ip_address(parts[2])
        ipaddress.ip_address(parts[3])
        sport = int(parts[4])
    except ValueError as exc:
        raise ProxyHeaderError(f"unreadable PROXY v1 line: {line[:60]!r}") from exc
    if (src.version == 4) != (parts[1] == "TCP4") or not 0 <= sport <= 65535:
        raise ProxyHeaderError(f"unreadable PROXY v1 line: {line[:60]!r}")
    return str(src), sport


def _parse_v2(data: bytes) -> tuple[tuple[str, int] | None, int] | None:
    if len(data) < _V2_HEADER.size:
        return None
    _, ver_cmd, family, length = _V2_HEADER.unpack_from(data)
    if ver_cmd >> 4 != 2:
        raise ProxyHeaderError(f"PROXY v2 header of version {ver_cmd >> 4}")
    total = _V2_HEADER.size + length
    if len(data) < total:
        return None
    command = ver_cmd & 0x0F
    if command == 0:  # LOCAL: the proxy speaking for itself
        return None, total
    if command != 1:
        raise ProxyHeaderError(f"PROXY v2 command {command} is not PROXY or LOCAL")
    if family not in _V2_FAMILIES:  # UNSPEC or unix: no address to count by
        return None, total
    size, kind = _V2_FAMILIES[family]
    if length < 2 * size + 4:
        raise ProxyHeaderError("PROXY v2 address block shorter than its family needs")
    body = data[_V2_HEADER.size :]
    src = kind(body[:size])
    (sport,) = struct.unpack_from("!H", body, 2 * size)
    host = str(src)
    if isinstance(src, ipaddress.IPv6Address) and src.ipv4_mapped is not None:
        host = str(src.ipv4_mapped)
    return (host, sport), total
