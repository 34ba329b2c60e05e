"""The real client address behind a trusted proxy: PROXY protocol v1/v2 and X-Forwarded-For.

The headers here are built byte for byte as the PROXY protocol spec (haproxy's
proxy-protocol.txt) lays them out, which is what HAProxy's send-proxy and
send-proxy-v2 put on the wire.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest

from gatewayd.http.realaddr import (
    V2_SIGNATURE,
    ProxyHeaderError,
    TrustedProxies,
    client_from_forwarded_for,
    parse_proxy_header,
)


def v2(src: str, dst: str, sport: int, dport: int, command: int = 1) -> bytes:
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    family = 0x11 if s.version == 4 else 0x21
    body = s.packed + d.packed + struct.pack("!HH", sport, dport)
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(body)) + body


def test_a_v1_line_names_the_client_and_what_follows_is_the_request():
    data = b"PROXY TCP4 127.0.0.2 127.0.0.1 40000 8080\r\nGET /health HTTP/1.1\r\n"
    source, used = parse_proxy_header(data)
    assert source == ("127.0.0.2", 40000)
    assert data[used:].startswith(b"GET /health")


def test_a_v2_header_names_the_client_ipv4_and_ipv6():
    data = v2("127.0.0.3", "127.0.0.1", 41000, 8080) + b"GET / HTTP/1.1\r\n"
    source, used = parse_proxy_header(data)
    assert source == ("127.0.0.3", 41000) and data[used:].startswith(b"GET /")
    source, _ = parse_proxy_header(v2("2001:db8::7", "2001:db8::1", 5, 8080))
    assert source == ("2001:db8::7", 5)


def test_a_header_cut_anywhere_asks_for_more_bytes():
    for whole in (
        b"PROXY TCP4 127.0.0.2 127.0.0.1 40000 8080\r\n",
        v2("10.1.2.3", "10.0.0.1", 1, 2),
    ):
        for cut in range(len(whole)):
            assert parse_proxy_header(whole[:cut]) is None, cut
        assert parse_proxy_header(whole)[1] == len(whole)


def test_health_checks_of_the_proxy_name_no_client():
    assert parse_proxy_header(b"PROXY UNKNOWN\r\n") == (None, 15)
    local = v2("0.0.0.0", "0.0.0.0", 0, 0, command=0)
    assert parse_proxy_header(local) == (None, len(local))


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\n",
        b"PROXY TCP4 nonsense\r\n",
        b"PROXY TCP6 127.0.0.2 127.0.0.1 1 2\r\n",
        b"PROXY TCP4 127.0.0.2 127.0.0.1 1 " + b"9" * 120,
        b"\r\n\r\nnot-v2-signature",
    ],
)
def test_bytes_that_are_no_proxy_header_are_refused(data):
    with pytest.raises(ProxyHeaderError):
        parse_proxy_header(data)


def test_forwarded_for_from_a_listed_proxy_names_the_first_untrusted_hop():
    trusted = TrustedProxies(["127.0.0.1/32", "10.0.0.0/8"])
    assert client_from_forwarded_for("127.0.0.1", "203.0.113.9", trusted) == "203.0.113.9"
    # The client's own claim (leftmost) is not believed past the hop our proxy saw.
    assert (
        client_from_forwarded_for("127.0.0.1", "6.6.6.6, 203.0.113.9, 10.0.0.5", trusted)
        == "203.0.113.9"
    )
    assert (
        client_from_forwarded_for("::ffff:127.0.0.1", "198.51.100.1:5555", trusted)
        == "198.51.100.1"
    )


def test_forwarded_for_from_an_unlisted_peer_is_ignored():
    trusted = TrustedProxies(["10.0.0.0/8"])
    assert client_from_forwarded_for("127.0.0.2", "203.0.113.9", trusted) is None
    assert client_from_forwarded_for("127.0.0.2", "203.0.113.9", TrustedProxies()) is None
    assert client_from_forwarded_for("10.0.0.1", "not-an-address", trusted) is None


def test_a_trusted_proxies_entry_that_is_no_network_is_refused_in_plain_words():
    with pytest.raises(ValueError, match="not an address or CIDR"):
        TrustedProxies(["10.0.0.0/33"])
