"""The mirror's HTTP/1.1 server: asyncio streams, keep-alive, files sent with sendfile.

A small server of our own rather than an ASGI stack because the mirror's one
hot path is a file range to a socket, and ``loop.sendfile`` hands that to the
kernel (``os.sendfile``) on a plain socket; under TLS asyncio falls back to
reads and writes by itself. It runs on the default event loop: uvloop has no
sendfile.

A handler is ``async def handler(req: Request) -> Response | FileResponse |
StreamResponse``. Request bodies are read by Content-Length or chunked, and
reach the handler as an async iterator (``async for chunk in req.body``), so
an upload of many GB never sits in memory; ``Expect: 100-continue`` is
answered when the handler starts reading. HEAD gets the headers of the GET.
A client that goes away mid-answer ends its connection quietly.

Connections are bounded per client as the gateway's ports bound them, with
the same piece (``llmgw.connbounds``): past ``max_per_address`` a client's new
connection is reset at once, so one client cannot hold all of
``max_connections`` and shut every node out of the weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from email.utils import formatdate
from urllib.parse import parse_qs, urlsplit

from llmgw.connbounds import MAX_PER_ADDRESS, AddressCounts, client_key, reset
from mirrord.http.messages import (
    Body,
    BodyIncomplete,
    BodyTooLarge,
    FileResponse,
    Handler,
    Headers,
    Request,
    Response,
    StreamResponse,
)

log = logging.getLogger(__name__)

# A request's line and headers: pip, huggingface_hub and httpx send under 2 KiB.
MAX_HEAD_BYTES = 64 << 10
# A request body left unread after the answer is read and dropped up to this
# much to keep the connection; past it the connection is closed instead.
DRAIN_MAX_BYTES = 1 << 20

_REASONS = {
    100: "Continue",
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No Content",
    206: "Partial Content",
    304: "Not Modified",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    416: "Range Not Satisfiable",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    507: "Insufficient Storage",
}


class _Date:
    """The Date header, made once a second rather than per answer."""

    def __init__(self) -> None:
        self._second = -1
        self._value = ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True)
        return self._value


# How long a connection's close may wait for the client's side of it.
CLOSE_WAIT_S = 5.0


class HttpServer:
    """The server: ``await start()`` binds, ``close()`` ends it and its connections."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 1024,
        max_per_address: int = MAX_PER_ADDRESS,
        idle_timeout_s: float = 75.0,
        server_name: str = "llmgw-mirror",
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.max_connections = max_connections
        # Open connections by client, each held to max_per_address.
        self.per_address = AddressCounts(max_per_address)
        # Connections reset for their client's bound (for logs and tests).
        self.refused_per_address = 0
        # 75 s: longer than the keep-alive pools of httpx (5 s) and pip's
        # urllib3, so a client reusing a connection never finds it just closed.
        self.idle_timeout_s = idle_timeout_s
        self.server_name = server_name
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task] = set()
        self._date = _Date()
        # Set by close(): connections are then dropped, not wound down politely.
        self._closing = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._connection,
            self.host,
            self.port,
            ssl=self.ssl_context,
            limit=MAX_HEAD_BYTES,
            backlog=1024,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        self._closing = True
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None

    @property
    def connections(self) -> int:
        return len(self._conns)

    # -- one connection ---------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - always run as a task
            return
        key = client_key(writer.get_extra_info("peername"))
        if not self.per_address.take(key):
            # Reset before a byte is read: the descriptor is free again at once.
            self.refused_per_address += 1
            if self.refused_per_address % 1000 == 1:
                log.warning(
                    "refused a connection from %s: it holds %d, the most one client may"
                    " (%d refused so far)",
                    key,
                    self.per_address.held(key),
                    self.refused_per_address,
                )
            reset(writer.transport)
            return
        self._conns.add(task)
        try:
            if len(self._conns) > self.max_connections:
                await self._send_plain(writer, 503, "the mirror has too many connections", False)
                return
            await self._requests(reader, writer)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, BodyIncomplete):
            pass  # the client went away: nothing to answer
        except asyncio.CancelledError:
            pass  # the server is closing
        finally:
            self._conns.discard(task)
            self.per_address.release(key)
            if self._closing:
                # A TLS close waits for the client's close_notify, which a client
                # holding a keep-alive connection never sends: a stopping mirror
                # would wait 30 s per connection.
                writer.transport.abort()
            else:
                writer.close()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(CLOSE_WAIT_S):
                        await writer.wait_closed()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_cert = None
        tls = writer.get_extra_info("sslcontext") is not None
        if tls:
            peer_cert = writer.get_extra_info("peercert") or None
        client = writer.get_extra_info("peername")
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout_s):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (TimeoutError, asyncio.IncompleteReadError):
                return  # idle, or closed between requests
            except asyncio.LimitOverrunError:
                await self._send_plain(writer, 431, "the request's headers are too long", False)
                return
            try:
                req = self._parse(head, reader, writer)
            except ValueError as e:
                await self._send_plain(writer, 400, str(e), False)
                return
            req.client = client[:2] if isinstance(client, tuple) else None
            req.peer_cert = peer_cert
            req.tls = tls
            keep = _keep_alive(req)
            if (
                req.method in ("POST", "PUT", "PATCH")
                and req.body.length is None
                and (not req.body.chunked)
            ):
                await self._send_plain(writer, 411, "send the body with a Content-Length", False)
                return
            started = time.monotonic()
            try:
                resp = await self.handler(req)
            except BodyIncomplete:
                return
            except BodyTooLarge as e:
                body = f"the request body is over {e.limit_bytes} bytes\n".encode()
                resp = Response(413, [("Content-Type", "text/plain")], body)
                keep = False
            except Exception:
                log.exception("mirror: %s %s failed", req.method, req.path)
                resp = Response(500, [("Content-Type", "text/plain")], b"internal error\n")
            if not req.body.finished:
                keep = keep and await req.body.drain(DRAIN_MAX_BYTES)
            keep = await self._send(writer, req, resp, keep)
            log.debug(
                "%s %s %s -> %d in %.1f ms",
                req.client[0] if req.client else "-",
                req.method,
                req.target,
                resp.status,
                (time.monotonic() - started) * 1000,
            )
            if not keep:
                return

    def _parse(self, head: bytes, reader, writer) -> Request:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise ValueError("not an HTTP/1.x request line")
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise ValueError("a header line without a name")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        length: int | None = None
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not chunked and "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError as e:
                raise ValueError("Content-Length is not a number") from e
            if length < 0:
                raise ValueError("Content-Length is negative")
        split = urlsplit(target)
        body = Body(
            reader,
            writer,
            length=length,
            chunked=chunked,
            expect_continue=headers.get("expect", "").lower() == "100-continue",
        )
        return Request(
            method=method.upper(),
            target=target,
            path=split.path or "/",
            query=parse_qs(split.query, keep_blank_values=True),
            headers=headers,
            version=version,
            body=body,
        )

    # -- answers ----------------------------------------------------------------

    def _head(self, status: int, headers: Headers, keep: bool, extra: Headers) -> bytes:
        out = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        out.append(f"Date: {self._date()}")
        out.append(f"Server: {self.server_name}")
        out.extend(f"{k}: {v}" for k, v in headers)
        out.extend(f"{k}: {v}" for k, v in extra)
        if not keep:
            out.append("Connection: close")
        return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")

    async def _send(self, writer: asyncio.StreamWriter, req: Request, resp, keep: bool) -> bool:
        head_only = req.method == "HEAD"
        if isinstance(resp, Response):
            extra = [("Content-Length", str(len(resp.body)))]
            data = self._head(resp.status, resp.headers, keep, extra)
            writer.write(data if head_only else data + resp.body)
            await writer.drain()
            return keep
        if isinstance(resp, FileResponse):
            extra = [("Content-Length", str(resp.count))]
            writer.write(self._head(resp.status, resp.headers, keep, extra))
            await writer.drain()
            if head_only or resp.count == 0:
                return keep
            # Opening a held blob is one quick syscall; a thread per answer would cost more.
            with open(resp.path, "rb") as f:  # noqa: ASYNC230
                sent = await asyncio.get_running_loop().sendfile(
                    writer.transport, f, resp.offset, resp.count
                )
            # A file shorter than it was said to be: the client must not
            # take what follows for the next answer.
            return keep and sent == resp.count
        return await self._send_stream(writer, req, resp, keep, head_only)

    async def _send_stream(self, writer, req: Request, resp: StreamResponse, keep, head_only):
        chunked = req.version == "HTTP/1.1"
        keep = keep and chunked
        extra = [("Transfer-Encoding", "chunked")] if chunked else []
        writer.write(self._head(resp.status, resp.headers, keep, extra))
        try:
            if head_only:
                await writer.drain()
                return keep
            async for data in resp.chunks:
                if not data:
                    continue
                writer.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
                await writer.drain()
            if chunked:
                writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            aclose = getattr(resp.chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        return keep

    async def _send_plain(self, writer, status: int, text: str, keep: bool) -> None:
        body = (text + "\n").encode()
        extra = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        writer.write(self._head(status, [], keep, extra) + body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()


def _keep_alive(req: Request) -> bool:
    conn = req.header("connection").lower()
    if req.version == "HTTP/1.0":
        return "keep-alive" in conn
    return "close" not in conn
