"""Raw ASGI for /mcp: the request's headers, its body within the limit, answers and SSE frames.

Plain ASGI rather than a framework: one pass over the header lines, one
dictionary, and the body read in the chunks uvicorn hands over — the gateway's
added latency per tool call is the budget (≤ 1 ms p50).
"""

from __future__ import annotations

import asyncio
import contextlib

from gatewayd.mcp.endpoint.errors import error_bytes

MIB = 1024 * 1024

# Seconds between SSE comment lines on an idle stream, so a proxy's idle-read
# timeout does not cut a stream that simply has nothing to say.
SSE_PING_S = 15.0

_JSON = [(b"content-type", b"application/json")]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]
PING_FRAME = b": ping\n\n"


class Request:
    """What /mcp reads of one HTTP request: method, the headers it cares about, raw lines."""

    __slots__ = ("headers", "method", "raw")

    def __init__(self, scope):
        self.method: str = scope["method"]
        raw = scope["headers"]
        self.raw: list[tuple[bytes, bytes]] = raw
        # Last copy wins here; duplicated routing headers are refused from ``raw``.
        self.headers: dict[str, str] = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}

    def str_lines(self) -> list[tuple[str, str]]:
        return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in self.raw]


def valid_id(v) -> bool:
    """A JSON-RPC request id: a string or an integer (JSON's true is no id)."""
    return isinstance(v, str | int) and not isinstance(v, bool)


class BodyTooLarge(Exception):
    pass


def size_words(n_bytes: int) -> str:
    return f"{n_bytes / MIB:g} MB" if n_bytes >= MIB else f"{n_bytes} bytes"


async def read_body(receive, headers: dict[str, str], max_bytes: int) -> bytes:
    """The request body, refused past ``max_bytes``: by its Content-Length before a byte
    is read, else counted as it arrives (a chunked body carries no length)."""
    length = headers.get("content-length")
    if length is not None:
        try:
            if int(length) > max_bytes:
                raise BodyTooLarge
        except ValueError:
            pass  # uvicorn has already refused a malformed length
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break  # the client left; what came is all there is
        chunk = msg.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > max_bytes:
                raise BodyTooLarge
            chunks.append(chunk)
        if not msg.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def send_bytes(
    send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    h = [*_JSON, (b"content-length", str(len(body)).encode())] if body else []
    if headers:
        h.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": h})
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send, status: int, code: int, message: str, data=None, *, req_id=None, headers=None
) -> None:
    await send_bytes(send, status, error_bytes(req_id, code, message, data), headers)


async def send_empty(send, status: int, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers or []})
    await send({"type": "http.response.body", "body": b""})


def sse_frame(message: bytes) -> bytes:
    return b"event: message\ndata: " + message + b"\n\n"


async def wait_disconnect(receive) -> None:
    """Return when the client has gone (the request's body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def pump_sse(send, receive, queue: asyncio.Queue, *, first: bytes = b"", last=None) -> None:
    """Answer with an SSE stream: ``first`` (a frame), then each frame put on ``queue``
    until a None is put (the stream is ended: ``last()`` gives a closing frame) or the
    client leaves. A comment line every SSE_PING_S keeps idle streams open."""
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    if first:
        await send({"type": "http.response.body", "body": first, "more_body": True})
    gone = asyncio.ensure_future(wait_disconnect(receive))
    got = asyncio.ensure_future(queue.get())
    try:
        while True:
            done, _ = await asyncio.wait(
                {gone, got}, timeout=SSE_PING_S, return_when=asyncio.FIRST_COMPLETED
            )
            if gone in done:
                return
            if got not in done:
                await send({"type": "http.response.body", "body": PING_FRAME, "more_body": True})
                continue
            frame = got.result()
            if frame is None:
                tail = last() if last is not None else b""
                await send({"type": "http.response.body", "body": tail, "more_body": False})
                return
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            got = asyncio.ensure_future(queue.get())
    finally:
        for t in (gone, got):
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(gone, got, return_exceptions=True)
