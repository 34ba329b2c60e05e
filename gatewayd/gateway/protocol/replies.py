"""The gateway's replies at the ASGI level: bodies read within a bound, JSON and errors sent.

Each API answers errors in its own shape (OpenAI's ``{"error": …}``, or
Anthropic's ``{"type": "error", …}``), and a stream the engine broke off ends
with one last event its clients read as an error.
"""

from __future__ import annotations

import json

from gatewayd.gateway.protocol import messages
from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.routing.forward import BrokeOff, Clock

MAX_BODY_BYTES = 32 * 2**20


def too_large(limit: int) -> ApiError:
    size = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"
    return ApiError(413, f"the body is over {size}", code="body_too_large")


async def read_body(receive, scope, limit: int = MAX_BODY_BYTES) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise too_large(limit)
    chunks, size = [], 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ApiError(400, "the client went away before its body was whole", code="bad_body")
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not msg.get("more_body"):
            return b"".join(chunks)


async def send_json(send, status: int, payload: dict, clock: Clock, headers=()) -> None:
    data = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                clock.header(),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def error_event(e: BrokeOff, *, anthropic: bool) -> bytes:
    """The last event of a stream the engine broke off, in the shape its API's clients read."""
    message = f"{e}; try again"
    if anthropic:
        return b"event: error\ndata: " + messages.error_bytes(502, message) + b"\n\n"
    return b"data: " + ApiError(502, message, code="upstream_error").body() + b"\n\n"


async def send_error(send, e: ApiError, clock: Clock, *, anthropic: bool = False) -> None:
    # Each API answers errors in its own shape: the SDKs read them.
    data = messages.error_bytes(e.status, e.message) if anthropic else e.body()
    await send(
        {
            "type": "http.response.start",
            "status": e.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                clock.header(),
                *e.headers(),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
