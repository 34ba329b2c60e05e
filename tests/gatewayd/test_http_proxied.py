"""The gateway port behind a trusted proxy (gatewayd/http/proxied.py), on real sockets in-process.

Before it, every connection through HAProxy counted as HAProxy's: one tenant
holding 256 connections through it locked every other client out. Here the
proxy's PROXY header or X-Forwarded-For names the client, only from a trusted
peer. A real HAProxy in front of a real gatewayd is tests/integration/gateway/
test_behind_haproxy.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import struct

import uvicorn

from gatewayd.http.guard import ConnectionBudget, GuardedHttpProtocol, PortGuard
from gatewayd.http.proxied import ProxiedHttpProtocol
from gatewayd.http.realaddr import V2_SIGNATURE, TrustedProxies
from llmgw.config import ConnectionsConfig

PROXY = "127.0.0.2"  # the trusted proxy's address: test sockets are bound to it
STRANGER = "127.0.0.5"
CLOSE_BOUND_S = 10.0


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        yield


async def _client_app(scope, receive, send):
    """Answers with the client uvicorn's scope names."""
    while (await receive()).get("more_body"):
        pass
    data = json.dumps({"client": list(scope["client"] or ())}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def _guard(*, max_per_address: int = 2, proxy_protocol: bool = True, header_timeout=10.0):
    cfg = ConnectionsConfig(max_per_address=max_per_address, header_timeout=header_timeout)
    return PortGuard(
        "http",
        cfg,
        ConnectionBudget(100),
        trusted=TrustedProxies([f"{PROXY}/32"]),
        proxy_protocol=proxy_protocol,
    )


@contextlib.asynccontextmanager
async def serving(guard: PortGuard):
    config = uvicorn.Config(
        _client_app,
        host="127.0.0.1",
        port=0,
        http=guard.http_protocol(),
        ws="none",
        lifespan="off",
        log_level="error",
        proxy_headers=False,
    )
    server = _Uvicorn(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), task.result()
        await asyncio.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task


def proxy_v1(client: str, port: int = 40000) -> bytes:
    return f"PROXY TCP4 {client} 127.0.0.1 {port} 8080\r\n".encode()


def proxy_v2(client: str, port: int = 40000) -> bytes:
    addrs = ipaddress.IPv4Address(client).packed + ipaddress.IPv4Address("127.0.0.1").packed
    body = addrs + struct.pack("!HH", port, 8080)
    return V2_SIGNATURE + struct.pack("!BBH", 0x21, 0x11, len(body)) + body


GET = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"


async def _connect(port: int, source: str):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict]:
    async with asyncio.timeout(CLOSE_BOUND_S):
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
        body = await reader.readexactly(length)
    return status, (json.loads(body) if status == 200 else {"text": body.decode()})


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        async with asyncio.timeout(CLOSE_BOUND_S):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


async def _through_proxy(port: int, header: bytes):
    """A connection from the proxy's address that starts with ``header`` and asks once."""
    reader, writer = await _connect(port, PROXY)
    writer.write(header + GET)
    return reader, writer


def test_with_no_proxy_trusted_the_port_keeps_the_plain_guarded_protocol():
    # The default costs nothing per request: no look at headers or PROXY lines.
    plain = PortGuard("http", ConnectionsConfig(), ConnectionBudget(10)).http_protocol()
    assert issubclass(plain, GuardedHttpProtocol)
    assert not issubclass(plain, ProxiedHttpProtocol)
    assert issubclass(_guard().http_protocol(), ProxiedHttpProtocol)


async def test_clients_named_in_proxy_headers_are_counted_each_on_their_own():
    guard = _guard(max_per_address=2)
    async with serving(guard) as port:
        held = []
        # Client A's two connections, one in each version of the header: both answered.
        for header in (proxy_v1("10.0.0.1", 40001), proxy_v2("10.0.0.1", 40002)):
            reader, writer = await _through_proxy(port, header)
            status, body = await _answer(reader)
            assert (status, body["client"][0]) == (200, "10.0.0.1")
            held.append(writer)
        assert guard.per_address.held("10.0.0.1") == 2
        assert guard.per_address.held(PROXY) == 0
        # A's third, through the same proxy: past A's bound, reset and counted.
        reader, writer = await _through_proxy(port, proxy_v2("10.0.0.1", 40003))
        assert await _closed(reader)
        writer.close()
        assert guard.refused["per_address"] == 1
        # Client B, through the same proxy, is not locked out by A.
        for n in range(2):
            reader, writer = await _through_proxy(port, proxy_v2("10.0.0.2", 41000 + n))
            status, body = await _answer(reader)
            assert body["client"] == ["10.0.0.2", 41000 + n]
            held.append(writer)
        for writer in held:
            writer.close()


async def test_bytes_after_the_header_in_the_same_packet_and_a_header_in_pieces_are_read():
    guard = _guard()
    async with serving(guard) as port:
        reader, writer = await _connect(port, PROXY)
        header = proxy_v2("10.0.0.7", 4242)
        for i in range(0, len(header), 5):  # a header sent five bytes at a time
            writer.write(header[i : i + 5])
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(GET + GET)  # two kept-alive requests
        for _ in range(2):
            assert (await _answer(reader))[1]["client"] == ["10.0.0.7", 4242]
        writer.close()


async def test_a_proxy_health_check_without_a_client_stays_the_proxys():
    guard = _guard()
    async with serving(guard) as port:
        local = V2_SIGNATURE + struct.pack("!BBH", 0x20, 0x00, 0)  # v2 LOCAL
        reader, writer = await _through_proxy(port, local)
        assert (await _answer(reader))[1]["client"][0] == PROXY
        writer.close()


async def test_a_trusted_proxys_connection_without_a_readable_header_is_reset_and_counted():
    guard = _guard()
    async with serving(guard) as port:
        reader, writer = await _through_proxy(port, b"")  # plain HTTP, no header
        assert await _closed(reader)
        writer.close()
        assert guard.refused["proxy_header"] == 1
        assert await _settles(guard)


async def test_a_proxy_header_slow_to_come_is_late_for_the_header_timeout():
    guard = _guard(header_timeout=0.3)
    async with serving(guard) as port:
        reader, writer = await _connect(port, PROXY)
        writer.write(proxy_v2("10.0.0.1")[:10])
        assert await _closed(reader)
        writer.close()
        assert guard.refused["header_timeout"] == 1


async def test_an_untrusted_peers_proxy_header_is_not_believed():
    guard = _guard(max_per_address=1)
    async with serving(guard) as port:
        # v1: an HTTP request line httptools cannot read, answered 400; counted as the peer.
        reader, writer = await _connect(port, STRANGER)
        writer.write(proxy_v1("10.0.0.1") + GET)
        status, _ = await _answer(reader)
        assert status == 400
        writer.close()
        await _settles(guard)
        # A plain request from it is the stranger's own, bounded by its own address.
        reader, writer = await _connect(port, STRANGER)
        writer.write(GET)
        assert (await _answer(reader))[1]["client"][0] == STRANGER
        r2, w2 = await _connect(port, STRANGER)
        assert await _closed(r2)
        w2.close()
        writer.close()


async def test_x_forwarded_for_from_a_trusted_peer_names_and_keys_the_client():
    guard = _guard(max_per_address=1, proxy_protocol=False)
    async with serving(guard) as port:
        req = b"GET / HTTP/1.1\r\nhost: x\r\nx-forwarded-for: 203.0.113.9, 10.0.0.3\r\n\r\n"
        reader, writer = await _connect(port, PROXY)
        writer.write(req)
        assert (await _answer(reader))[1]["client"] == ["10.0.0.3", 0]
        assert guard.per_address.held("10.0.0.3") == 1
        # The same client's second connection through the proxy: past its bound of 1.
        r2, w2 = await _connect(port, PROXY)
        w2.write(req)
        assert await _closed(r2)
        w2.close()
        assert guard.refused["per_address"] == 1
        # Another client's through the same proxy still goes.
        r3, w3 = await _connect(port, PROXY)
        w3.write(b"GET / HTTP/1.1\r\nhost: x\r\nx-forwarded-for: 10.0.0.4\r\n\r\n")
        assert (await _answer(r3))[1]["client"] == ["10.0.0.4", 0]
        # A later request on a kept-alive connection names its own client in scope.
        w3.write(b"GET / HTTP/1.1\r\nhost: x\r\nx-forwarded-for: 10.0.0.5\r\n\r\n")
        assert (await _answer(r3))[1]["client"] == ["10.0.0.5", 0]
        assert guard.per_address.held("10.0.0.4") == 1  # still counted as the first
        writer.close()
        w3.close()


async def test_x_forwarded_for_from_an_untrusted_peer_is_not_believed():
    guard = _guard(max_per_address=5, proxy_protocol=False)
    async with serving(guard) as port:
        reader, writer = await _connect(port, STRANGER)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\nx-forwarded-for: 10.0.0.3\r\n\r\n")
        assert (await _answer(reader))[1]["client"][0] == STRANGER
        assert guard.per_address.held(STRANGER) == 1
        assert guard.per_address.held("10.0.0.3") == 0
        writer.close()


async def _settles(guard: PortGuard) -> bool:
    """Whether the guard's counts go back to nothing held (connections ended)."""
    for _ in range(200):
        if guard.open == 0 and not guard.per_address:
            return True
        await asyncio.sleep(0.01)
    return False
