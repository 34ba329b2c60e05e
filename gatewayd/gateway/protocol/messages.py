"""``POST /v1/messages``: Anthropic's API over engines that speak OpenAI's.

The request is turned into a chat completion, sent along the same path as
any other (key, limits, replica, retries), and the answer turned back — as a
whole message, or as Anthropic's stream events in Anthropic's order. The
engine's token counts go into the forward's outcome on the way.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterable

from gatewayd.gateway.protocol import validate
from gatewayd.gateway.protocol.anthropic import chat_to_message, error_body
from gatewayd.gateway.protocol.anthropic_request import (
    AnthropicRequestError,
    messages_to_chat,
    wants_thinking,
)
from gatewayd.gateway.protocol.anthropic_stream import StreamConverter, sse_encode
from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.protocol.sse import frame_json, has_token, usage_into


def to_chat(body: bytes) -> tuple[dict, dict]:
    """(the Anthropic request, the chat request it becomes); AnthropicRequestError if bad."""
    try:
        request = validate.loads(body)
    except ApiError as e:
        raise AnthropicRequestError(e.message, e.param or "") from None
    if not isinstance(request, dict):
        raise AnthropicRequestError("the body must be a JSON object", "")
    return request, messages_to_chat(request)


def error_bytes(status: int, message: str) -> bytes:
    return json.dumps(error_body(status, message)).encode()


async def relay_whole(
    status: int, data: bytes, request: dict, send, overhead_header, outcome=None
) -> None:
    """A whole chat answer (or an engine's error) as Anthropic's; its usage into ``outcome``."""
    model = request.get("model", "")
    if status != 200:
        text = data.decode(errors="replace")
        try:
            message = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = text[:500] or f"the engine answered {status}"
        body = error_bytes(status, message)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), overhead_header()],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    answer = json.loads(data)
    if outcome is not None:
        usage_into(outcome, answer.get("usage"))
    message = chat_to_message(answer, model=model, include_thinking=wants_thinking(request))
    body = json.dumps(message).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                overhead_header(),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def relay_stream(
    pieces: AsyncIterable[bytes],
    request: dict,
    send,
    overhead_header,
    outcome=None,
    sent_at: float = 0.0,
) -> None:
    """An engine's chat stream as Anthropic's events, as it comes.

    The usage at its end goes into ``outcome``, and ``outcome.ttft_s`` is
    set when the first token arrives (``sent_at``: when the request went out).
    """
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-cache"),
                overhead_header(),
            ],
        }
    )
    converter = StreamConverter(request.get("model", ""), include_thinking=wants_thinking(request))
    first_token = outcome is None
    buffer = b""
    async for piece in pieces:
        buffer += piece
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            chunk = frame_json(frame)
            if chunk is None:
                continue
            if not first_token and has_token(chunk):
                first_token = True
                outcome.ttft_s = time.perf_counter() - sent_at
            out = b"".join(sse_encode(e, d) for e, d in converter.feed(chunk))
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
    if outcome is not None:
        usage_into(outcome, converter.usage)
    out = b"".join(sse_encode(e, d) for e, d in converter.finish())
    await send({"type": "http.response.body", "body": out})
