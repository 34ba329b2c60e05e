"""``POST /v1/messages``: Anthropic's API over engines that speak OpenAI's.

The request is turned into a chat completion, sent along the same path as
any other (key, limits, replica, retries), and the answer turned back — as a
whole message, or as Anthropic's stream events in Anthropic's order.
"""

from __future__ import annotations

import json

import aiohttp

from gatewayd.gateway.anthropic import chat_to_message, error_body
from gatewayd.gateway.anthropic_request import (
    AnthropicRequestError,
    messages_to_chat,
    wants_thinking,
)
from gatewayd.gateway.anthropic_stream import StreamConverter, sse_encode


def to_chat(body: bytes) -> tuple[dict, dict]:
    """(the Anthropic request, the chat request it becomes); AnthropicRequestError if bad."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise AnthropicRequestError("the body is not valid JSON", "") from None
    if not isinstance(request, dict):
        raise AnthropicRequestError("the body must be a JSON object", "")
    return request, messages_to_chat(request)


def error_bytes(status: int, message: str) -> bytes:
    return json.dumps(error_body(status, message)).encode()


async def relay(resp: aiohttp.ClientResponse, request: dict, send, overhead_header) -> None:
    """The engine's chat answer as Anthropic's, whole or streamed."""
    model = request.get("model", "")
    thinking = wants_thinking(request)
    if resp.status != 200:
        text = (await resp.read()).decode(errors="replace")
        try:
            message = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = text[:500] or f"the engine answered {resp.status}"
        data = error_bytes(resp.status, message)
        await send(
            {
                "type": "http.response.start",
                "status": resp.status,
                "headers": [(b"content-type", b"application/json"), overhead_header()],
            }
        )
        await send({"type": "http.response.body", "body": data})
        return
    if not request.get("stream"):
        answer = json.loads(await resp.read())
        data = json.dumps(chat_to_message(answer, model=model, include_thinking=thinking)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    overhead_header(),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})
        return
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
    converter = StreamConverter(model, include_thinking=thinking)
    buffer = b""
    async for piece in resp.content.iter_any():
        buffer += piece
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            for line in frame.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    continue
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    continue
                out = b"".join(sse_encode(e, d) for e, d in converter.feed(chunk))
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
    out = b"".join(sse_encode(e, d) for e, d in converter.finish())
    await send({"type": "http.response.body", "body": out})
