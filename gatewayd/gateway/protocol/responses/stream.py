"""An engine's streamed chat completion as the Responses API's event stream.

``EventStream`` is fed chat chunks one by one and answers with the events
OpenAI sends, in OpenAI's order, each with the next ``sequence_number``::

    response.created, response.in_progress
    per output item, one after the other:
      response.output_item.added
        reasoning: content_part.added, reasoning_text.delta…, reasoning_text.done,
                   content_part.done
        message:   content_part.added, output_text.delta…, output_text.done,
                   content_part.done
        function call: function_call_arguments.delta…, function_call_arguments.done
      response.output_item.done
    response.completed (or response.incomplete when the answer was cut at its limit)

An item is opened when the kind of what streams changes and closed before
the next one opens, so output indexes only grow. The usage comes in the last
chunk (the gateway asks for ``stream_options.include_usage``).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as _quoted

from gatewayd.gateway.protocol.responses.answer import (
    Envelope,
    function_call_item,
    message_item,
    new_id,
    reasoning_item,
    reasoning_text,
    status_of,
    text_part,
    usage,
)

Event = dict


def sse(event: Event) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + json.dumps(event).encode() + b"\n\n"


# A text delta is most of a stream's events: written from a template, only its
# text through the JSON encoder (the same bytes json.dumps writes, a third of the time).
_TEXT_DELTA = (
    'event: response.output_text.delta\ndata: {"type": "response.output_text.delta",'
    ' "sequence_number": %d, "item_id": "%s", "output_index": %d, "content_index": %d,'
    ' "delta": %s, "logprobs": []}\n\n'
)


def encode(events: list[Event]) -> bytes:
    """The events as server-sent events, as ``sse`` writes each; faster for text deltas,
    and a Response object that two events share (created, in_progress) encoded once."""
    out = []
    shared: tuple[object, str] | None = None
    for e in events:
        kind = e["type"]
        if kind == "response.output_text.delta" and e["logprobs"] == []:
            out.append(
                _TEXT_DELTA
                % (
                    e["sequence_number"],
                    e["item_id"],
                    e["output_index"],
                    e["content_index"],
                    _quoted(e["delta"]),
                )
            )
            continue
        response = e.get("response")
        if response is not None and len(e) == 3:
            if shared is None or shared[0] is not response:
                shared = (response, json.dumps(response))
            out.append(
                f'event: {kind}\ndata: {{"type": "{kind}", "sequence_number":'
                f' {e["sequence_number"]}, "response": {shared[1]}}}\n\n'
            )
            continue
        out.append(sse(e).decode())
    return "".join(out).encode()


class _Item:
    __slots__ = ("call_id", "chunks", "id", "index", "kind", "name", "position")

    def __init__(self, kind: str, item_id: str, index: int):
        self.kind, self.id, self.index = kind, item_id, index
        self.chunks: list[str] = []
        self.call_id = self.name = ""
        self.position = -1  # a tool call's index in chat's tool_calls


class EventStream:
    """Chat completion chunks in, Responses API events out."""

    def __init__(self, envelope: Envelope):
        self._envelope = envelope
        self._seq = 0
        self._started = False
        self._finished = False
        self._open: _Item | None = None
        self._done: list[dict] = []
        self._finish_reason: str | None = None
        self._usage: dict | None = None

    @property
    def output(self) -> list[dict]:
        """The output items completed so far (all of them after ``finish``)."""
        return self._done

    @property
    def response(self) -> dict | None:
        """The final Response object, once ``finish`` made it."""
        return self._final if self._finished else None

    def _event(self, kind: str, **fields) -> Event:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def start(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        response = self._envelope.response("in_progress", [])
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def feed(self, chunk: dict) -> list[Event]:
        """The events one chunk (a parsed ``data:`` line) makes; often one, sometimes none."""
        if self._finished:
            return []
        events = self.start()
        if isinstance(chunk.get("error"), dict) and not chunk.get("choices"):
            # An engine failing mid-stream says so in a chunk of its own (llama.cpp does).
            message = chunk["error"].get("message") or "the engine failed mid-answer"
            return events + self.fail(f"the engine failed: {message}")
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if thought := reasoning_text(delta):
                events += self._text("reasoning", thought)
            if text := delta.get("content"):
                events += self._text("message", text)
            for call in delta.get("tool_calls") or ():
                events += self._tool_call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[Event]:
        """The events that end the response, once the engine's stream has ended."""
        if self._finished:
            return []
        events = self.start()
        if not self._done and self._open is None:
            # An answer of nothing is still one (empty) message.
            events += self._switch(_Item("message", new_id("msg"), 0))
        events += self._close()
        self._finished = True
        status, incomplete = status_of(self._finish_reason)
        self._final = self._envelope.response(
            status, self._done, usage=usage(self._usage), incomplete=incomplete
        )
        kind = "response.completed" if status == "completed" else "response.incomplete"
        events.append(self._event(kind, response=self._final))
        return events

    def fail(self, message: str) -> list[Event]:
        """The events that end a response the engine broke off."""
        if self._finished:
            return []
        events = self.start() + self._close()
        self._finished = True
        error = {"code": "server_error", "message": message}
        self._final = self._envelope.response("failed", self._done, error=error)
        events.append(self._event("response.failed", response=self._final))
        return events

    # ---- items -------------------------------------------------------------

    def _next_index(self) -> int:
        return len(self._done) + (1 if self._open is not None else 0)

    def _text(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        item = self._open
        if item is None or item.kind != kind:
            item = _Item(kind, new_id("rs" if kind == "reasoning" else "msg"), self._next_index())
            events += self._switch(item)
        item.chunks.append(text)
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if kind == "reasoning":
            events.append(self._event("response.reasoning_text.delta", **where, delta=text))
        else:
            events.append(
                self._event("response.output_text.delta", **where, delta=text, logprobs=[])
            )
        return events

    def _tool_call(self, call: dict) -> list[Event]:
        events: list[Event] = []
        function = call.get("function") or {}
        position = call.get("index", 0)
        call_id = call.get("id")
        item = self._open
        # A new call: another position, or a new id where an engine numbers none.
        if (
            item is None
            or item.kind != "function_call"
            or item.position != position
            or (call_id and item.call_id and call_id != item.call_id)
        ):
            item = _Item("function_call", new_id("fc"), self._next_index())
            item.position = position
            item.call_id = call_id or new_id("call")
            item.name = function.get("name") or ""
            events += self._switch(item)
        elif function.get("name") and not item.name:
            item.name = function["name"]
        if arguments := function.get("arguments"):
            item.chunks.append(arguments)
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item.id,
                    output_index=item.index,
                    delta=arguments,
                )
            )
        return events

    def _switch(self, item: _Item) -> list[Event]:
        events = self._close()
        self._open = item
        if item.kind == "function_call":
            added = function_call_item(item.id, item.call_id, item.name, "", "in_progress")
            return events + [
                self._event("response.output_item.added", output_index=item.index, item=added)
            ]
        if item.kind == "reasoning":
            added = {**reasoning_item(item.id, "", "in_progress"), "content": []}
            part = {"type": "reasoning_text", "text": ""}
        else:
            added = message_item(item.id, None, "in_progress")
            part = text_part("")
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        return events + [
            self._event("response.output_item.added", output_index=item.index, item=added),
            self._event("response.content_part.added", **where, part=part),
        ]

    def _close(self) -> list[Event]:
        item, self._open = self._open, None
        if item is None:
            return []
        text = "".join(item.chunks)
        where = {"item_id": item.id, "output_index": item.index}
        if item.kind == "function_call":
            done = function_call_item(item.id, item.call_id, item.name, text)
            events = [
                self._event(
                    "response.function_call_arguments.done",
                    **where,
                    name=item.name,
                    arguments=text,
                )
            ]
        elif item.kind == "reasoning":
            done = reasoning_item(item.id, text)
            part = done["content"][0]
            events = [
                self._event("response.reasoning_text.done", **where, content_index=0, text=text),
                self._event("response.content_part.done", **where, content_index=0, part=part),
            ]
        else:
            done = message_item(item.id, text)
            part = done["content"][0]
            events = [
                self._event(
                    "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
                ),
                self._event("response.content_part.done", **where, content_index=0, part=part),
            ]
        self._done.append(done)
        events.append(self._event("response.output_item.done", output_index=item.index, item=done))
        return events
