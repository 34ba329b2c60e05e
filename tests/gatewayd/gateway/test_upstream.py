"""The replicas' HTTP client: what it sends, the three ways a body ends, and when a connection is kept."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from gatewayd.gateway.routing import upstream
from gatewayd.gateway.routing.upstream import (
    ConnectError,
    DisconnectedError,
    HttpClient,
    ProtocolError,
    UpstreamError,
)


class Engine:
    """A raw HTTP/1.1 server on a free port that answers each request as the test scripts it.

    ``answer(n, writer)`` writes the answer to the n-th request (0-based,
    over all connections). ``requests``: (head, body) of each request;
    ``connections``: how many were opened; ``closed``: how many the client closed.
    """

    def __init__(self, answer) -> None:
        self.answer = answer
        self.requests: list[tuple[bytes, bytes]] = []
        self.connections = 0
        self.closed = 0
        self.url = ""
        self._tasks: set[asyncio.Task] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._tasks.add(asyncio.current_task())
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed += 1
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                n = len(self.requests)
                self.requests.append((head, body))
                if await self.answer(n, writer) == "close":
                    writer.close()
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed += 1
        except asyncio.CancelledError:
            pass  # the test is over
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self):
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            yield self
        finally:
            server.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)


def ok(body: bytes = b'{"ok":true}', extra: bytes = b""):
    async def answer(n, writer):
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Engine: sim\r\n"
            + extra
            + b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
        )
        await writer.drain()

    return answer


@contextlib.asynccontextmanager
async def client(**kw):
    c = HttpClient("Bearer ek", **kw)
    try:
        yield c
    finally:
        c.close()


async def test_a_post_carries_the_key_and_the_body_and_its_answer_is_read_whole():
    async with Engine(ok()).running() as engine, client() as c:
        body = json.dumps({"model": "m"}).encode()
        resp = await c.post(engine.url + "/", "/v1/chat/completions", body)
        assert resp.status == 200
        assert resp.headers["content-type"] == "application/json"
        assert resp.headers["x-engine"] == "sim"
        assert await resp.read() == b'{"ok":true}'
        resp.release()
    head, sent = engine.requests[0]
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    port = engine.url.rsplit(":", 1)[1].encode()
    assert b"Host: 127.0.0.1:" + port in lines
    assert b"Authorization: Bearer ek" in lines
    assert b"Content-Type: application/json" in lines
    assert b"Content-Length: %d" % len(body) in lines
    assert sent == body


async def test_a_base_url_with_a_path_prefixes_the_requests_path():
    async with (
        Engine(ok()).running() as engine,
        client() as c,
        await c.post(engine.url + "/engine/", "/v1/embeddings", b"{}") as resp,
    ):
        await resp.read()
    assert engine.requests[0][0].startswith(b"POST /engine/v1/embeddings HTTP/1.1\r\n")


async def test_one_connection_carries_request_after_request():
    async with Engine(ok()).running() as engine, client() as c:
        for _ in range(5):
            async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
                assert await resp.read() == b'{"ok":true}'
    assert len(engine.requests) == 5 and engine.connections == 1


async def test_requests_at_once_open_connections_that_are_then_reused():
    async with Engine(ok()).running() as engine, client() as c:

        async def one():
            async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
                return await resp.read()

        assert await asyncio.gather(*(one() for _ in range(4))) == [b'{"ok":true}'] * 4
        opened = engine.connections
        await asyncio.gather(*(one() for _ in range(4)))
    assert opened == 4 and engine.connections == 4


async def test_no_more_idle_connections_are_kept_than_the_cap():
    async with Engine(ok()).running() as engine, client(max_idle_per_host=2) as c:

        async def one():
            async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
                return await resp.read()

        await asyncio.gather(*(one() for _ in range(4)))
        await asyncio.sleep(0.05)
        assert engine.connections == 4 and engine.closed == 2


async def test_a_connection_idle_too_long_is_closed_rather_than_reused(monkeypatch):
    # Engines drop idle connections; one reused as the engine drops it costs a retry.
    monkeypatch.setattr(upstream, "IDLE_S", 0.05)
    async with Engine(ok()).running() as engine, client() as c:
        for _ in range(2):
            async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
                await resp.read()
            await asyncio.sleep(0.1)
        assert engine.connections == 2 and engine.closed == 1


async def test_a_chunked_stream_comes_piece_by_piece_as_it_is_written():
    go_on = asyncio.Event()

    async def answer(n, writer):
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        writer.write(b"d\r\ndata: first\n\n\r\n")
        await writer.drain()
        await go_on.wait()
        writer.write(b"e\r\ndata: second\n\n\r\n0\r\n\r\n")
        await writer.drain()

    async with Engine(answer).running() as engine, client() as c:
        resp = await c.post(engine.url, "/v1/chat/completions", b"{}")
        assert resp.headers["transfer-encoding"] == "chunked"
        # The first piece arrives while the engine still holds the second back.
        assert await anext(resp) == b"data: first\n\n"
        go_on.set()
        assert [p async for p in resp] == [b"data: second\n\n"]
        resp.release()
        # Read to its end, the connection is kept for the next request.
        resp = await c.post(engine.url, "/v1/chat/completions", b"{}")
        assert await resp.read() == b"data: first\n\ndata: second\n\n"
        resp.release()
    assert engine.connections == 1


async def test_an_answer_with_neither_length_nor_chunks_ends_with_its_connection():
    async def answer(n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of ")
        await writer.drain()
        writer.write(b"it")
        return "close"

    async with Engine(answer).running() as engine, client() as c:
        for _ in range(2):
            async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
                assert await resp.read() == b"all of it"
    assert engine.connections == 2


async def test_an_answer_that_asks_to_close_is_not_reused():
    async with Engine(ok(extra=b"Connection: close\r\n")).running() as engine, client() as c:
        for _ in range(2):
            async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
                await resp.read()
    assert engine.connections == 2


async def test_a_kept_connection_the_engine_closed_is_retried_once_on_a_fresh_one():
    # Engines close idle connections (uvicorn after 5 s); the next request must not fail for it.
    async def answer(n, writer):
        await ok()(n, writer)
        if n == 0:
            return "close"  # closed without saying so: the client still holds it as idle

    async with Engine(answer).running() as engine, client() as c:
        async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
            await resp.read()
        await asyncio.sleep(0.05)
        async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
            assert await resp.read() == b'{"ok":true}'
    assert engine.connections == 2


async def test_a_kept_connection_reset_as_it_is_reused_is_retried_on_a_fresh_one():
    # The race the sleep above avoids: the engine's close arrives after the request went.
    async with Engine(ok()).running() as engine, client() as c:
        async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
            await resp.read()
        conn = c._pools[("127.0.0.1", int(engine.url.rsplit(":", 1)[1]), "")]._idle[-1]
        sock = conn._transport.get_extra_info("socket")
        sock.shutdown(2)  # as if the engine had gone: nothing will answer on it
        async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
            assert await resp.read() == b'{"ok":true}'
    assert engine.connections == 2


async def test_a_fresh_connection_closed_before_answering_is_an_upstream_error():
    async def answer(n, writer):
        return "close"

    async with Engine(answer).running() as engine, client() as c:
        with pytest.raises(DisconnectedError) as err:
            await c.post(engine.url, "/v1/completions", b"{}")
    assert isinstance(err.value, OSError) and "before answering" in str(err.value)
    assert engine.connections == 1  # a fresh connection is not retried


async def test_an_answer_cut_before_its_length_is_an_error_and_its_connection_is_dropped():
    async def answer(n, writer):
        if n == 0:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
            return "close"
        await ok()(n, writer)

    async with Engine(answer).running() as engine, client() as c:
        resp = await c.post(engine.url, "/v1/completions", b"{}")
        with pytest.raises(DisconnectedError, match="before its answer was whole"):
            await resp.read()
        resp.release()
        async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
            assert await resp.read() == b'{"ok":true}'
    assert engine.connections == 2


async def test_a_stream_cut_mid_way_gives_what_came_then_an_error():
    async def answer(n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await writer.drain()
        return "close"

    async with Engine(answer).running() as engine, client() as c:
        resp = await c.post(engine.url, "/v1/chat/completions", b"{}")
        got = []
        with pytest.raises(UpstreamError):
            async for piece in resp:
                got.append(piece)
        assert b"".join(got) == b"abc"


async def test_an_answer_let_go_before_its_end_closes_its_connection():
    release = asyncio.Event()

    async def answer(n, writer):
        if n == 0:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            await writer.drain()
            await release.wait()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        await ok()(n, writer)

    async with Engine(answer).running() as engine, client() as c:
        resp = await c.post(engine.url, "/v1/chat/completions", b"{}")
        assert await anext(resp) == b"abc"
        resp.release()
        release.set()
        async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
            assert await resp.read() == b'{"ok":true}'
    assert engine.connections == 2


async def test_a_reader_slower_than_the_engine_holds_the_engine_back():
    # Without it a slow client would make the gateway buffer a whole stream in memory.
    total = 64 * 2**20
    piece = b"x" * 2**20
    written = 0

    async def answer(n, writer):
        nonlocal written
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        for _ in range(total // len(piece)):
            writer.write(piece)
            await writer.drain()
            written += len(piece)

    async with Engine(answer).running() as engine, client() as c:
        resp = await c.post(engine.url, "/v1/completions", b"{}")
        before = -1
        while written != before:
            before = written
            await asyncio.sleep(0.2)
        assert written < total  # the engine waits for the reader
        got = 0
        async for p in resp:
            got += len(p)
        assert got == total
        resp.release()


async def test_an_informational_answer_is_skipped_and_no_content_has_no_body():
    async def answer(n, writer):
        if n == 0:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 204 No Content\r\nX-N: %d\r\n\r\n" % n)
        await writer.drain()

    async with Engine(answer).running() as engine, client() as c:
        for n in range(2):
            async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
                assert (resp.status, resp.headers["x-n"]) == (204, str(n))
                assert await resp.read() == b""
    assert engine.connections == 1


async def test_a_repeated_header_is_read_as_one_comma_separated_value():
    async with (
        Engine(ok(extra=b"Vary: a\r\nvary: b\r\n")).running() as engine,
        client() as c,
        await c.post(engine.url, "/v1/completions", b"{}") as resp,
    ):
        assert resp.headers["vary"] == "a, b"


async def test_an_answer_that_is_not_http_is_a_protocol_error():
    async def answer(n, writer):
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n")
        await writer.drain()

    async with Engine(answer).running() as engine, client() as c:
        with pytest.raises(ProtocolError, match="not HTTP"):
            await c.post(engine.url, "/v1/completions", b"{}")


async def test_nothing_listening_is_a_connect_error():
    async with client() as c:
        with pytest.raises(ConnectError, match="could not connect to 127.0.0.1:9"):
            await c.post("http://127.0.0.1:9", "/v1/completions", b"{}")


async def test_a_connection_not_made_in_time_is_a_connect_error(monkeypatch):
    async def never(*args, **kw):
        await asyncio.sleep(10)

    async with client(connect_timeout_s=0.05) as c:
        monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", never)
        with pytest.raises(ConnectError, match="within 0.05 s"):
            await c.post("http://127.0.0.1:9", "/v1/completions", b"{}")


async def test_a_request_given_up_while_waiting_closes_its_connection():
    answered = asyncio.Event()

    async def answer(n, writer):
        if n == 0:
            await answered.wait()
        await ok()(n, writer)

    async with Engine(answer).running() as engine, client() as c:
        task = asyncio.create_task(c.post(engine.url, "/v1/completions", b"{}"))
        while not engine.requests:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        answered.set()
        async with await c.post(engine.url, "/v1/completions", b"{}") as resp:
            assert await resp.read() == b'{"ok":true}'
    assert engine.connections == 2


def test_only_http_urls_are_taken_and_https_only_with_the_engine_doors_tls():
    c = HttpClient()
    with pytest.raises(ValueError, match="not an http"):
        asyncio.run(c.post("ftp://api.example.com", "/v1/completions", b"{}"))
    # A replica behind a TLS door, and no certificate for it: never in clear instead.
    with pytest.raises(ConnectError, match="no certificate for the engine doors"):
        asyncio.run(c.post("https://10.0.0.5:9000", "/v1/completions", b"{}"))
