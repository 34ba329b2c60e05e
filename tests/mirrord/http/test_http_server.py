"""The mirror's HTTP/1.1 server on loopback, spoken to over raw sockets and httpx."""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from mirrord.http.messages import Request, Response, StreamResponse
from mirrord.http.ranges import parse_range, serve_file
from mirrord.http.server import HttpServer

DATA = os.urandom(300_000)


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(DATA)
    return path


class Seen:
    def __init__(self) -> None:
        self.uploads: list[int] = []
        self.chunk_counts: list[int] = []


@pytest.fixture
async def server(data_file):
    seen = Seen()

    async def handler(req: Request):
        if req.path == "/file":
            return serve_file(req, data_file, len(DATA), "abc123", [("X-Thing", "1")])
        if req.path == "/upload":
            total = chunks = 0
            async for data in req.body:
                total += len(data)
                chunks += 1
            seen.uploads.append(total)
            seen.chunk_counts.append(chunks)
            return Response.json({"bytes": total})
        if req.path == "/small":
            return Response.json({"n": len(await req.body.read(10))})
        if req.path == "/refuse":
            return Response(401, [], b"no")
        if req.path == "/stream":

            async def lines():
                for i in range(3):
                    yield b'{"n":%d}\n' % i

            return StreamResponse(200, [("Content-Type", "application/x-ndjson")], lines())
        if req.path == "/boom":
            raise RuntimeError("a handler bug")
        return Response.json({"path": req.path, "q": req.arg("q")})

    srv = HttpServer(handler, "127.0.0.1", 0, idle_timeout_s=30)
    await srv.start()
    srv.seen = seen
    yield srv
    await srv.close()


async def _raw(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def _read_answer(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    body = b""
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    return head[0], headers, body


async def test_two_requests_share_one_keep_alive_connection(server):
    reader, writer = await _raw(server.port, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = await _read_answer(reader)
    assert status == "HTTP/1.1 200 OK" and b'"/a"' in body
    writer.write(b"GET /b?q=2 HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, body = await _read_answer(reader)
    assert status == "HTTP/1.1 200 OK" and b'"q":"2"' in body
    assert "connection" not in headers
    writer.close()


async def test_connection_close_is_honoured(server):
    reader, writer = await _raw(server.port, b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n")
    _, headers, _ = await _read_answer(reader)
    assert headers["connection"] == "close"
    assert await reader.read() == b""
    writer.close()


async def test_a_whole_file_and_a_head_carry_the_same_headers(server):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        got = await c.get("/file")
        head = await c.head("/file")
    assert got.status_code == 200 and got.content == DATA
    assert head.status_code == 200 and head.content == b""
    for h in ("etag", "content-length", "accept-ranges", "x-thing", "content-type"):
        assert head.headers[h] == got.headers[h]
    assert got.headers["etag"] == '"abc123"'
    assert got.headers["content-length"] == str(len(DATA))


@pytest.mark.parametrize(
    ("rng", "first", "last"),
    [
        ("bytes=100-", 100, len(DATA) - 1),
        ("bytes=0-0", 0, 0),
        ("bytes=10-19", 10, 19),
        ("bytes=-500", len(DATA) - 500, len(DATA) - 1),
        ("bytes=299990-999999", 299990, len(DATA) - 1),
        ("bytes=-999999", 0, len(DATA) - 1),
    ],
)
async def test_a_range_gets_206_with_its_content_range(server, rng, first, last):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        r = await c.get("/file", headers={"Range": rng})
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes {first}-{last}/{len(DATA)}"
    assert r.content == DATA[first : last + 1]


@pytest.mark.parametrize("rng", ["bytes=300000-", "bytes=999999-", "bytes=-0"])
async def test_a_range_past_the_end_gets_416_naming_the_size(server, rng):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        r = await c.get("/file", headers={"Range": rng})
        # The connection is still good for the next request.
        again = await c.get("/file", headers={"Range": "bytes=0-3"})
    assert r.status_code == 416
    assert r.headers["content-range"] == f"bytes */{len(DATA)}"
    assert again.status_code == 206 and again.content == DATA[:4]


@pytest.mark.parametrize("rng", ["bytes=5-1", "items=0-1", "bytes=0-1,5-6", "bytes=x-"])
def test_a_range_that_cannot_be_read_is_ignored(rng):
    assert parse_range(rng, 100) is None


async def test_if_range_with_the_etag_resumes_and_with_another_sends_the_whole(server):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        same = await c.get("/file", headers={"Range": "bytes=10-", "If-Range": '"abc123"'})
        other = await c.get("/file", headers={"Range": "bytes=10-", "If-Range": '"old"'})
    assert same.status_code == 206 and same.content == DATA[10:]
    assert other.status_code == 200 and other.content == DATA


async def test_a_head_of_a_range_sends_no_body_and_keeps_the_connection(server):
    reader, writer = await _raw(
        server.port, b"HEAD /file HTTP/1.1\r\nRange: bytes=5-9\r\n\r\nGET /a HTTP/1.1\r\n\r\n"
    )
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    assert head.startswith("HTTP/1.1 206") and "Content-Length: 5\r\n" in head
    # What follows is the next answer, not the five bytes.
    status, _, body = await _read_answer(reader)
    assert status == "HTTP/1.1 200 OK" and b'"/a"' in body
    writer.close()


async def test_an_upload_streams_to_the_handler_in_pieces(server):
    big = os.urandom(5 << 20)

    async def gen():
        for i in range(0, len(big), 1 << 16):
            yield big[i : i + (1 << 16)]

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        sized = await c.put("/upload", content=big)
        chunked = await c.put("/upload", content=gen())
    assert sized.json() == {"bytes": len(big)} and chunked.json() == {"bytes": len(big)}
    # Read in pieces, never as one 5 MB string.
    assert all(n > 1 for n in server.seen.chunk_counts)


async def test_expect_100_continue_is_answered_before_the_body_is_sent(server):
    reader, writer = await _raw(
        server.port,
        b"PUT /upload HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
    )
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"abcd")
    _, _, body = await _read_answer(reader)
    assert body == b'{"bytes":4}'
    writer.close()


async def test_a_refusal_before_the_body_closes_instead_of_waiting_for_it(server):
    # The client waits for 100 Continue; the handler answers without reading.
    reader, writer = await _raw(
        server.port,
        b"PUT /refuse HTTP/1.1\r\nContent-Length: 999999\r\nExpect: 100-continue\r\n\r\n",
    )
    status, headers, _ = await _read_answer(reader)
    assert status.startswith("HTTP/1.1 401") and headers["connection"] == "close"
    writer.close()


async def test_a_body_over_what_the_handler_takes_gets_413(server):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        small = await c.post("/small", content=b"12345")
        big = await c.post("/small", content=b"x" * 11)
    assert small.json() == {"n": 5}
    assert big.status_code == 413


async def test_a_put_without_a_length_gets_411(server):
    reader, writer = await _raw(server.port, b"PUT /upload HTTP/1.1\r\n\r\n")
    status, _, _ = await _read_answer(reader)
    assert status.startswith("HTTP/1.1 411")
    writer.close()


async def test_a_streamed_answer_is_chunked_and_the_connection_stays(server):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        async with c.stream("GET", "/stream") as r:
            lines = [line async for line in r.aiter_lines()]
        assert r.headers["transfer-encoding"] == "chunked"
        after = await c.get("/a")
    assert lines == ['{"n":0}', '{"n":1}', '{"n":2}'] and after.status_code == 200


async def test_a_handler_bug_is_a_500_and_the_server_goes_on(server):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        r = await c.get("/boom")
        after = await c.get("/a")
    assert r.status_code == 500 and after.status_code == 200


async def test_a_bad_request_line_gets_400(server):
    reader, writer = await _raw(server.port, b"HELLO\r\n\r\n")
    status, _, _ = await _read_answer(reader)
    assert status.startswith("HTTP/1.1 400")
    writer.close()


async def test_a_client_gone_mid_file_ends_quietly(server, data_file, caplog):
    # Guards: a reset during sendfile logged a traceback per aborted download.
    big = data_file.parent / "big"
    big.write_bytes(os.urandom(32 << 20))

    async def handler(req):
        return serve_file(req, big, big.stat().st_size, "e", [])

    server.handler = handler
    reader, writer = await _raw(server.port, b"GET /big HTTP/1.1\r\n\r\n")
    await reader.readexactly(1000)
    writer.transport.abort()
    # The server still answers, and forgot the dead connection.
    server.handler = lambda req: asyncio.sleep(0, Response.json({"ok": True}))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as c:
        assert (await c.get("/a")).json() == {"ok": True}
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_an_idle_keep_alive_connection_is_closed():
    srv = HttpServer(lambda req: asyncio.sleep(0, Response()), "127.0.0.1", 0, idle_timeout_s=0.05)
    await srv.start()
    try:
        reader, writer = await _raw(srv.port, b"GET / HTTP/1.1\r\n\r\n")
        await _read_answer(reader)
        # Nothing more is sent: the server ends the connection on its own.
        assert await reader.read() == b""
        writer.close()
    finally:
        await srv.close()


async def test_connections_past_the_bound_are_told_so():
    release = asyncio.Event()

    async def slow(req):
        await release.wait()
        return Response()

    srv = HttpServer(slow, "127.0.0.1", 0, max_connections=1)
    await srv.start()
    try:
        _, w1 = await _raw(srv.port, b"GET / HTTP/1.1\r\n\r\n")
        while srv.connections < 1:
            await asyncio.sleep(0)
        reader, w2 = await _raw(srv.port, b"GET / HTTP/1.1\r\n\r\n")
        status, _, _ = await _read_answer(reader)
        assert status.startswith("HTTP/1.1 503")
        release.set()
        w1.close()
        w2.close()
    finally:
        await srv.close()
