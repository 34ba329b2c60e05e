"""The ASGI ``send`` that turns an engine's chat answer into the Responses API's, as it is relayed.

``Gateway.complete`` forwards the chat completion and hands what the engine
answers to ``Relay.send``: a whole answer is turned into one Response object,
a stream into the Responses events as its chunks come (the forwarder has
already turned engine errors into the gateway's own). ``on_done`` is awaited with the final Response object before its last
byte is sent, so a client that asks for a stored response at once finds it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from gatewayd.gateway.protocol.errors import ApiError, engine_error
from gatewayd.gateway.protocol.responses.answer import Envelope, from_chat
from gatewayd.gateway.protocol.responses.stream import EventStream, encode
from gatewayd.gateway.protocol.sse import frame_json

OnDone = Callable[[dict], Awaitable[None]]
_decode = json.JSONDecoder().decode


def _chunk(frame: bytes) -> dict | None:
    """A frame's chunk; engines write one ``data:`` line a frame, read here without
    ``frame_json``'s general walk (multi-line data, comments), which it falls back to."""
    if frame.startswith(b"data: {") and b"\n" not in frame:
        try:
            chunk = _decode(frame[6:].decode())
        except (ValueError, UnicodeDecodeError):
            return None
        return chunk if isinstance(chunk, dict) else None
    return frame_json(frame)


class Relay:
    """One request's converting ``send``; ``call`` is the gateway's Call."""

    def __init__(self, call, envelope: Envelope, on_done: OnDone | None = None):
        self._call = call
        self._envelope = envelope
        self._on_done = on_done
        self._status = 0
        self._stream: EventStream | None = None
        self._chunks: list[bytes] = []
        self._buf = b""
        self.response: dict | None = None

    @property
    def streaming(self) -> bool:
        return self._stream is not None

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self._status = message["status"]
            ctype = b""
            for name, value in message.get("headers") or ():
                if name == b"content-type":
                    ctype = value
            if self._status == 200 and ctype.startswith(b"text/event-stream"):
                await self._begin_stream()
            return
        if message["type"] != "http.response.body":
            return
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self._stream is not None:
            await self._feed(body, more)
            return
        self._chunks.append(body)
        if not more:
            await self._whole(b"".join(self._chunks))

    async def _whole(self, data: bytes) -> None:
        if self._status != 200:
            # The forwarder raises engine errors itself; this is for any it lets through.
            model = self._envelope.model
            await self._call.error(engine_error(self._status, data, model=model))
            return
        try:
            answer = _decode(data.decode())
        except (ValueError, UnicodeDecodeError):
            answer = None
        if not isinstance(answer, dict):
            await self._call.error(
                ApiError(502, "the engine's answer was not JSON", code="upstream_error")
            )
            return
        self.response = from_chat(self._envelope, answer)
        if self._on_done is not None:
            await self._on_done(self.response)
        await self._call.json(200, self.response)

    async def _begin_stream(self) -> None:
        self._stream = EventStream(self._envelope)
        await self._call.send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    self._call.clock.header(),
                ],
            }
        )
        await self._out(self._stream.start(), more=True)

    async def _feed(self, piece: bytes, more: bool) -> None:
        stream = self._stream
        buf = self._buf + piece if self._buf else piece
        if b"\r\n" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events = []
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            chunk = _chunk(buf[:cut])
            buf = buf[cut + 2 :]
            if chunk is not None:
                events += stream.feed(chunk)
        self._buf = buf
        if more:
            if events:
                await self._out(events, more=True)
            return
        if buf.strip() and (chunk := _chunk(buf.strip())) is not None:
            events += stream.feed(chunk)
        self._buf = b""
        last = stream.finish()
        self.response = stream.response
        if self._on_done is not None and self.response is not None:
            await self._on_done(self.response)
        await self._out(events + last, more=False)

    async def broke_off(self, message: str) -> None:
        """End a stream the engine broke off with response.failed."""
        if self._stream is not None:
            events = self._stream.fail(message)
            self.response = self._stream.response
            await self._out(events, more=False)

    async def _out(self, events: list, *, more: bool) -> None:
        if not events and more:
            return
        data = encode(events)
        await self._call.send({"type": "http.response.body", "body": data, "more_body": more})
