"""``n`` > 1 for engines that answer one choice a request: n requests, merged into one answer.

vLLM, SGLang and the sim engine take ``n`` and answer n choices themselves,
as do outside providers; llama.cpp's server takes ``n`` only up to its slots
(``--parallel``, 1 for most models here) and refuses more ("must be between
1 <= value <= 1"). For those, the gateway sends the request n times with
``n: 1`` — each retried and relayed like any other — and merges the answers:
choices indexed 0..n-1, usage summed (each request was processed and is
metered as such); with several prompts (completions), prompt p's choice c is
index p * n + c, as OpenAI numbers them. A stream merges as it comes: each sub-stream's chunks are
relayed with their choice's index, the response started once, the usage
chunk (when asked for) and ``[DONE]`` sent once at the end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.protocol.sse import frame_json

# Engines that answer n choices in one request.
TAKES_N = frozenset(("vllm", "sglang", "sim"))
PATHS = ("/v1/chat/completions", "/v1/completions")


def choices_wanted(path: str, request: dict | None, engine: str, external: bool) -> int:
    """How many requests to fan out to (0: send the request as it is)."""
    if path not in PATHS or request is None or external or engine in TAKES_N or not engine:
        return 0
    n = request.get("n")
    if type(n) is not int or n <= 1:
        return 0
    return n


class Merge:
    """The sub-requests' answers, merged into one for the client."""

    def __init__(self, n: int, send, *, stream: bool, include_usage: bool) -> None:
        self.n = n
        self._send = send
        self._stream = stream
        self._include_usage = include_usage
        self._started = False
        self._head: dict | None = None
        self._wholes: list[tuple[int, dict | None, int]] = []
        self._start_message: dict | None = None

    def send_for(self, index: int) -> Callable[[dict], Awaitable[None]]:
        """The ASGI send sub-request ``index`` answers into."""
        buffer = b""
        status = 0
        chunks: list[bytes] = []

        async def send(message: dict) -> None:
            nonlocal buffer, status
            if message["type"] == "http.response.start":
                status = message["status"]
                if self._stream and status == 200:
                    await self._start(message)
                elif not self._stream:
                    self._start_message = self._start_message or message
                return
            body = message.get("body", b"")
            if not self._stream or status != 200:
                chunks.append(body)
                if not message.get("more_body"):
                    self._wholes.append((index, _json(b"".join(chunks)), status))
                return
            buffer += body
            while b"\n\n" in buffer:
                frame, buffer = buffer.split(b"\n\n", 1)
                out = self._reindexed(frame, index)
                if out:
                    await self._send({"type": "http.response.body", "body": out, "more_body": True})

        return send

    async def _start(self, message: dict) -> None:
        if self._started:
            return
        self._started = True
        await self._send(message)

    def _reindexed(self, frame: bytes, index: int) -> bytes:
        chunk = frame_json(frame)
        if chunk is None:
            return b""  # [DONE] is sent once, at the end
        choices = chunk.get("choices")
        if not choices:
            return b""  # a sub-stream's usage: the merged usage goes at the end
        if self._head is None:
            self._head = {k: v for k, v in chunk.items() if k not in ("choices", "usage")}
        # One id and one timestamp for the whole answer, as one engine's n choices have.
        chunk.update(self._head)
        for choice in choices:
            if isinstance(choice, dict):
                choice["index"] = self._index(choice, index)
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    def _index(self, choice: dict, sub: int) -> int:
        # A completions request of several prompts answers a choice per prompt;
        # OpenAI numbers prompt p's choice c as p * n + c.
        prompt = choice.get("index")
        return (prompt if type(prompt) is int else 0) * self.n + sub

    async def finish(self, usage: dict, clock_header) -> None:
        """The merged answer (a whole one), or the end of the merged stream."""
        if self._stream:
            if self._include_usage and self._head is not None:
                last = {**self._head, "choices": [], "usage": usage}
                out = b"data: " + json.dumps(last).encode() + b"\n\n"
                await self._send({"type": "http.response.body", "body": out, "more_body": True})
            await self._send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        answers = sorted(self._wholes, key=lambda w: w[0])
        base = next((a for _, a, s in answers if a is not None and s == 200), None)
        if base is None:
            raise ApiError(502, "no choice of the answer came back", code="upstream_error")
        choices = []
        for index, answer, _ in answers:
            for choice in (answer or {}).get("choices") or ():
                if isinstance(choice, dict):
                    choice["index"] = self._index(choice, index)
                    choices.append(choice)
        choices.sort(key=lambda c: c["index"])
        merged = {**base, "choices": choices, "usage": usage}
        data = json.dumps(merged).encode()
        await self._send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    clock_header(),
                ],
            }
        )
        await self._send({"type": "http.response.body", "body": data})

    @property
    def started(self) -> bool:
        return self._started


def _json(data: bytes) -> dict | None:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


async def gather_all(tasks: list[Awaitable]) -> list:
    """Every sub-request's result (an Outcome or the exception it raised), in order."""
    return await asyncio.gather(*tasks, return_exceptions=True)
