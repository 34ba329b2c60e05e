"""The HTTP port's connection bounds (gatewayd/http/guard.py), on real sockets in-process.

The flood itself, against a real gatewayd process at its open-files limit, is
tests/integration/gateway/test_connection_bounds.py; here are the rules one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
import uvicorn

from gatewayd.http.guard import (
    FD_RESERVE,
    MIN_TOTAL,
    ConnectionBudget,
    PortGuard,
    client_key,
    total_within,
)
from llmgw.config import ConnectionsConfig

CLOSE_BOUND_S = 20.0


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        yield


async def _echo_app(scope, receive, send):
    """Answers with the size of the body it read."""
    size, more = 0, True
    while more:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return
        size += len(msg.get("body", b""))
        more = msg.get("more_body", False)
    data = json.dumps({"size": size}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


@contextlib.asynccontextmanager
async def serving(guard: PortGuard):
    config = uvicorn.Config(
        _echo_app,
        host="127.0.0.1",
        port=0,
        http=guard.http_protocol(),
        ws="none",
        lifespan="off",
        log_level="warning",
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


async def _connect(port: int, source: str):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (EOF or reset) within the bound."""
    try:
        async with asyncio.timeout(CLOSE_BOUND_S):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


async def _answer(reader: asyncio.StreamReader) -> dict:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    return json.loads(await reader.readexactly(length))


def test_a_client_is_counted_by_its_ipv4_address_its_ipv6_slash_64_or_as_this_machine():
    assert client_key(("10.1.2.3", 5000)) == "10.1.2.3"
    assert client_key(("::ffff:10.1.2.3", 5000, 0, 0)) == "10.1.2.3"
    # One host may use every address of its /64: they count as one client.
    assert client_key(("2001:db8:1:2:aaaa::1", 5000, 0, 0)) == "2001:db8:1:2::/64"
    assert client_key(("2001:db8:1:2:ffff::9", 5000, 0, 0)) == "2001:db8:1:2::/64"
    assert client_key("/run/llmgw.sock") == "local"


def test_the_total_leaves_the_open_files_limit_room_for_the_gateways_own_work():
    # At 20,000 open files a client connection and its engine connection each
    # take one, beside a reserve for the store, agents and logs.
    assert total_within(10_000, 20_000) == (20_000 - FD_RESERVE) // 2
    assert total_within(1_000, 20_000) == 1_000
    assert total_within(10_000, 256) == MIN_TOTAL


async def test_past_the_total_a_connection_from_any_address_is_reset_and_counted():
    guard = PortGuard("http", ConnectionsConfig(max_per_address=8), ConnectionBudget(3))
    async with serving(guard) as port:
        held = [await _connect(port, f"127.0.0.{4 + i}") for i in range(3)]
        for _, writer in held:
            writer.write(b"GET / HTTP/1.1\r\n")  # headers begun, never finished
        reader, writer = await _connect(port, "127.0.0.9")
        assert await _closed(reader)
        assert guard.refused["total"] == 1 and guard.budget.open == 3
        # One of them goes: there is room again, and the table keeps no entry for it.
        held[0][1].close()
        await held[0][1].wait_closed()
        while guard.budget.open == 3:
            await asyncio.sleep(0.01)
        assert "127.0.0.4" not in guard.per_address
        reader, writer = await _connect(port, "127.0.0.9")
        writer.write(b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi")
        assert await _answer(reader) == {"size": 2}
        writer.close()
        for _, w in held[1:]:
            w.close()
    assert guard.per_address == {} and guard.budget.open == 0


async def test_a_body_that_keeps_coming_is_read_past_the_deadline_and_one_that_stops_is_cut():
    cfg = ConnectionsConfig(body_read_timeout=1.5, header_timeout=1.5)
    guard = PortGuard("http", cfg, ConnectionBudget(100))
    async with serving(guard) as port:
        # Each read brings bytes well within the deadline, for longer than it in all.
        reader, writer = await _connect(port, "127.0.0.1")
        writer.write(b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 12\r\n\r\n")
        for _ in range(12):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.25)
        assert await _answer(reader) == {"size": 12}
        writer.close()
        # One that stops halfway is closed, and counted.
        reader, writer = await _connect(port, "127.0.0.1")
        writer.write(b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 12\r\n\r\nxxxxxx")
        assert await _closed(reader)
        writer.close()
    assert guard.refused["body_timeout"] == 1 and guard.refused["header_timeout"] == 0


async def test_a_kept_alive_connection_owes_its_next_headers_from_the_last_answer():
    # Regression: uvicorn stops its idle timer at the first byte of the next request,
    # so one byte after an answer held a connection for ever.
    cfg = ConnectionsConfig(header_timeout=1.0, keepalive_timeout=30.0)
    guard = PortGuard("http", cfg, ConnectionBudget(100))
    async with serving(guard) as port:
        reader, writer = await _connect(port, "127.0.0.1")
        writer.write(b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert await _answer(reader) == {"size": 0}
        writer.write(b"G")
        assert await _closed(reader)
        writer.close()
    assert guard.refused["header_timeout"] == 1


@pytest.mark.parametrize("reason", ["per_address", "total"])
def test_refusals_are_metrics_by_port_and_reason(reason):
    from prometheus_client import generate_latest

    from gatewayd.gateway.metering.metrics import GatewayMetrics

    metrics = GatewayMetrics(known=lambda _: False)
    guard = PortGuard("metrics", ConnectionsConfig(), ConnectionBudget(10), metrics)
    guard.count(reason, "10.0.0.1")
    text = generate_latest(metrics.registry).decode()
    assert f'llmgw_connections_refused_total{{port="metrics",reason="{reason}"}} 1.0' in text
    assert 'llmgw_connections_open{port="metrics"} 0.0' in text


def test_a_request_that_came_during_a_stall_is_answered_not_dropped_as_idle():
    # Regression (the fault suite's SIGSTOP of a control plane): a stall while the
    # loop handled reads (uvloop's poll phase) is followed by the due timers, before
    # the next poll reads what came meanwhile. The idle deadline of a kept-alive
    # connection then closed it with a request waiting unread in its socket, and
    # the front's request was lost unanswered.
    import socket
    import threading
    import time

    import uvloop

    cfg = ConnectionsConfig(keepalive_timeout=0.3, header_timeout=0.3)
    guard = PortGuard("http", cfg, ConnectionBudget(100))
    loop = uvloop.new_event_loop()
    ready, stalled, ports = threading.Event(), threading.Event(), []
    stop = asyncio.Event()

    class Stall(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            stalled.set()
            time.sleep(1.0)  # the loop held up, in the middle of its reads

    async def serve():
        stall_server = await loop.create_server(Stall, "127.0.0.1", 0)
        async with serving(guard) as p:
            ports[:] = [p, stall_server.sockets[0].getsockname()[1]]
            ready.set()
            await stop.wait()
        stall_server.close()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        assert ready.wait(20)
        request = b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi"
        with (
            socket.create_connection(("127.0.0.1", ports[0]), timeout=20) as s,
            socket.create_connection(("127.0.0.1", ports[1]), timeout=20) as holder,
        ):
            s.sendall(request)
            assert b"200 OK" in _whole_answer(s)
            holder.sendall(b"x")
            assert stalled.wait(20)
            s.sendall(request)  # kept alive, on time, while the loop is held up
            answer = _whole_answer(s)
            assert b"200 OK" in answer, answer
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(20)
        loop.close()


def _whole_answer(s) -> bytes:
    """One HTTP answer read whole: its headers, then the body its Content-Length says (the
    two may come in separate reads)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body
