"""An engine's streamed chat completion as Anthropic's message stream.

``StreamConverter`` is fed OpenAI's chunks one by one and answers with the
events Anthropic sends, in Anthropic's order::

    message_start
    content_block_start / content_block_delta… / content_block_stop   per block
    message_delta (stop_reason, usage)
    message_stop

A block is opened when the kind of what streams changes — thinking, text, a
tool call — and closed before the next one opens, so indexes only grow. A
thinking block gets its signature just before it closes, as Anthropic sends it.
Usage comes last from an engine (``stream_options.include_usage``), so token
counts are sent in ``message_delta``; ``message_start`` has them only when an
engine reports usage on every chunk.

An engine that fails mid-stream is reported with ``sse_encode("error",
error_body(…))`` instead of ``finish()``, as Anthropic does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from gatewayd.gateway.protocol.anthropic import (
    message_id,
    reasoning_text,
    stop_reason,
    thinking_signature,
    tool_use_id,
    usage,
)

Event = tuple[str, dict]


@dataclass
class _ToolBlock:
    index: int
    call_id: str | None


class StreamConverter:
    """OpenAI chat completion chunks in, Anthropic stream events out.

    ``model`` is the name the client asked for; ``include_thinking`` is false
    when the client did not ask for thinking (``anthropic.wants_thinking``).
    """

    def __init__(self, model: str, *, include_thinking: bool = True) -> None:
        self._model = model
        self._include_thinking = include_thinking
        self._started = False
        self._finished = False
        self._index = -1
        self._open: str | None = None  # the kind of the open block, if one is
        self._thinking: list[str] = []
        # OpenAI's tool_calls[].index → the block streaming that call.
        self._tools: dict[int, _ToolBlock] = {}
        self._finish_reason: str | None = None
        self._matched_stop: object = None
        self._usage: dict | None = None

    def feed(self, chunk: dict) -> list[Event]:
        """The events one chunk (a parsed ``data:`` line) makes; often none."""
        events = [] if self._started else self._start(chunk)
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            # An Anthropic message is one answer; n > 1 is not asked of the engine.
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = reasoning_text(delta)
            if reasoning and self._include_thinking:
                events += self._switch_to(
                    "thinking", {"type": "thinking", "thinking": "", "signature": ""}
                )
                self._thinking.append(reasoning)
                events.append(self._delta({"type": "thinking_delta", "thinking": reasoning}))
            if text := delta.get("content"):
                events += self._switch_to("text", {"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": text}))
            for call in delta.get("tool_calls") or []:
                events += self._tool_call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
                self._matched_stop = choice.get("stop_reason")
        return events

    @property
    def usage(self) -> dict | None:
        """The engine's OpenAI usage object, once a chunk carried one."""
        return self._usage

    def finish(self) -> list[Event]:
        """The events that end the message, once the engine's stream has ended."""
        if self._finished:
            return []
        self._finished = True
        events = [] if self._started else self._start({})
        events += self._close()
        reason, sequence = stop_reason(
            self._finish_reason, self._matched_stop, has_tool_calls=bool(self._tools)
        )
        counts = usage(self._usage)
        if self._usage is None:
            # An engine that never said: leave message_start's input count standing.
            del counts["input_tokens"]
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": counts,
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def _start(self, chunk: dict) -> list[Event]:
        self._started = True
        message = {
            "id": message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage(chunk.get("usage")), "output_tokens": 0},
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def _tool_call(self, call: dict) -> list[Event]:
        events: list[Event] = []
        position = call.get("index", 0)
        call_id = call.get("id")
        function = call.get("function") or {}
        block = self._tools.get(position)
        # A new id at a known index: an engine that numbers no calls started another.
        if block is None or (call_id and block.call_id and call_id != block.call_id):
            events += self._switch_to(
                "tool_use",
                {
                    "type": "tool_use",
                    "id": call_id or tool_use_id(),
                    "name": function.get("name") or "",
                    "input": {},
                },
                force=True,
            )
            block = self._tools[position] = _ToolBlock(self._index, call_id)
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        if arguments:
            # Engines stream one call after another; a late fragment of an earlier
            # call still names its block, which the SDKs accumulate by index.
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": block.index,
                        "delta": {"type": "input_json_delta", "partial_json": arguments},
                    },
                )
            )
        return events

    def _switch_to(self, kind: str, content_block: dict, *, force: bool = False) -> list[Event]:
        if self._open == kind and not force:
            return []
        events = self._close()
        self._index += 1
        self._open = kind
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": self._index,
                    "content_block": content_block,
                },
            )
        )
        return events

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        events = []
        if self._open == "thinking":
            signature = thinking_signature("".join(self._thinking))
            self._thinking = []
            events.append(self._delta({"type": "signature_delta", "signature": signature}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": self._index}))
        self._open = None
        return events

    def _delta(self, delta: dict) -> Event:
        return (
            "content_block_delta",
            {"type": "content_block_delta", "index": self._index, "delta": delta},
        )


def sse_encode(event: str, data: dict) -> bytes:
    """One server-sent event as Anthropic writes them."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def anthropic_sse(
    chunks: AsyncIterable[dict], converter: StreamConverter
) -> AsyncIterator[bytes]:
    """The Anthropic stream, encoded, for an engine's parsed chunks."""
    async for chunk in chunks:
        for event, data in converter.feed(chunk):
            yield sse_encode(event, data)
    for event, data in converter.finish():
        yield sse_encode(event, data)
