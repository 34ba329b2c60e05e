"""One connection through an engine's door: the request heads checked and re-keyed, the rest relayed.

The gateway's requests are parsed as they arrive (llhttp, through
``httptools``, as uvicorn and the gateway's own client do) only far enough
to find where each request's head ends: its ``Authorization`` must carry one
of the keys the door accepts for this replica (compared in constant time),
and is replaced by the engine's own key, which never leaves the node. The
body goes on as it came (re-chunked when the request was chunked). What the
engine answers is relayed byte for byte, unparsed: a stream of tokens costs
one read and one write per piece.

A request without an accepted key is answered 401 and the connection closed;
nothing of it reaches the engine. An upgrade (WebSocket, h2c) or CONNECT is
refused the same way: the door carries HTTP/1.1 requests and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Callable

import httptools

log = logging.getLogger(__name__)

READ_BYTES = 64 * 1024


class Refused(Exception):
    """A request the door does not let through; carries the status and the words."""

    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def refusal(status: int, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 answer in OpenAI's error shape that closes the connection."""
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    ).encode()
    reason = {400: "Bad Request", 401: "Unauthorized"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    return head + body


class RequestRewriter:
    """Feeds the client's bytes through llhttp and gives back what the engine is to get.

    ``accepted()`` returns the keys (whole ``Authorization`` values, bytes)
    let through now — read at each request, so a rotation takes effect on the
    next request of a kept connection; ``engine_authorization`` is what the
    engine gets instead.
    """

    def __init__(self, accepted: Callable[[], tuple[bytes, ...]], engine_authorization: bytes):
        self._accepted = accepted
        self._engine_auth = engine_authorization
        self._parser = httptools.HttpRequestParser(self)
        self._out: list[bytes] = []
        # A refusal raised in a callback reaches feed() wrapped by llhttp: kept here.
        self._refused: Refused | None = None
        self._reset()

    def _reset(self) -> None:
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._auth: bytes | None = None
        self._chunked = False

    def feed(self, data: bytes) -> bytes:
        """What to send the engine for ``data``; raises Refused to end the connection."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            if self._refused is not None:
                raise self._refused from None
            if isinstance(e, httptools.HttpParserUpgrade):
                raise Refused(
                    400, "the engine door carries HTTP/1.1 requests only", "bad_request"
                ) from e
            raise Refused(400, f"not an HTTP/1.1 request: {e}", "bad_request") from e
        out, self._out = b"".join(self._out), []
        return out

    # ---- llhttp's callbacks ----

    def on_message_begin(self) -> None:
        self._reset()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower == b"authorization":
            self._auth = value
            return
        if lower == b"transfer-encoding" and b"chunked" in value.lower():
            self._chunked = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        method = self._parser.get_method()
        if method == b"CONNECT" or self._parser.should_upgrade():
            self._refuse(400, "the engine door carries HTTP/1.1 requests only", "bad_request")
        auth = self._auth or b""
        # Every accepted key is compared, so the time taken says nothing of which matched.
        matched = False
        for key in self._accepted():
            matched |= hmac.compare_digest(auth, key)
        if not matched:
            self._refuse(
                401,
                "this replica takes requests from the gateway only (no accepted engine key)",
                "invalid_engine_key",
            )
        lines = [b"%b %b HTTP/1.1\r\n" % (method, self._url)]
        lines += [b"%b: %b\r\n" % (n, v) for n, v in self._headers]
        lines.append(b"Authorization: %b\r\n\r\n" % self._engine_auth)
        self._out.append(b"".join(lines))

    def _refuse(self, status: int, message: str, code: str) -> None:
        self._refused = Refused(status, message, code)
        raise self._refused

    def on_body(self, body: bytes) -> None:
        if self._chunked:
            self._out.append(b"%x\r\n%b\r\n" % (len(body), body))
        else:
            self._out.append(body)

    def on_message_complete(self) -> None:
        if self._chunked:
            self._out.append(b"0\r\n\r\n")


async def relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    engine_host: str,
    engine_port: int,
    rewriter: RequestRewriter,
) -> None:
    """Carry one client connection to the engine and back until either side closes."""
    try:
        first = await client_reader.read(READ_BYTES)
        if not first:
            return
        try:
            data = rewriter.feed(first)
        except Refused as e:
            client_writer.write(refusal(e.status, e.message, e.code))
            await client_writer.drain()
            return
        try:
            engine_reader, engine_writer = await asyncio.open_connection(engine_host, engine_port)
        except OSError as e:
            log.info("engine door: the engine on port %s did not take a connection: %s", engine_port, e)
            return
        try:
            engine_writer.write(data)
            up = asyncio.create_task(_requests(client_reader, engine_writer, client_writer, rewriter))
            try:
                await _answers(engine_reader, client_writer)
            finally:
                up.cancel()
                with contextlib.suppress(BaseException):
                    await up
        finally:
            engine_writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await engine_writer.wait_closed()
    except (OSError, ConnectionError, asyncio.IncompleteReadError):
        pass  # either side went away: the other is closed below
    finally:
        client_writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await client_writer.wait_closed()


async def _requests(
    client_reader: asyncio.StreamReader,
    engine_writer: asyncio.StreamWriter,
    client_writer: asyncio.StreamWriter,
    rewriter: RequestRewriter,
) -> None:
    """The client's later requests on the same connection, each head checked."""
    try:
        while data := await client_reader.read(READ_BYTES):
            try:
                out = rewriter.feed(data)
            except Refused as e:
                # The answers before it were relayed; this one ends the connection.
                client_writer.write(refusal(e.status, e.message, e.code))
                engine_writer.close()
                return
            if out:
                engine_writer.write(out)
                await engine_writer.drain()
        # The client is done sending: the engine's answer may still be coming.
        if engine_writer.can_write_eof():
            engine_writer.write_eof()
    except (OSError, ConnectionError):
        engine_writer.close()


async def _answers(engine_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
    while data := await engine_reader.read(READ_BYTES):
        client_writer.write(data)
        await client_writer.drain()
