"""The Responses API's event stream made from an engine's chat chunks: OpenAI's order and shapes.

The events are checked by OpenAI's own pieces: each against the published
description's ``ResponseStreamEvent``, and the whole stream by the ``openai``
SDK's stream accumulator (``responses.stream``), which refuses events out of
order, behind ``httpx2.MockTransport``.
"""

from __future__ import annotations

import json
import time

import httpx2
import openai
import pytest

from gatewayd.gateway.protocol.responses.answer import Envelope, from_chat
from gatewayd.gateway.protocol.responses.relay import Relay
from gatewayd.gateway.protocol.responses.request import to_chat
from gatewayd.gateway.protocol.responses.stream import EventStream, encode, sse
from gatewayd.gateway.routing.forward import Clock
from tests.gatewayd.gateway.openapi_check import event_errors, response_errors

MODEL = "gemma-3-270m"
USAGE = {"prompt_tokens": 50, "completion_tokens": 30, "total_tokens": 80}


def chunk(delta: dict | None = None, finish_reason: str | None = None) -> dict:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish_reason}
    return {"id": "c1", "object": "chat.completion.chunk", "model": "x", "choices": [choice]}


def usage_chunk() -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "model": "x", "choices": [],
            "usage": USAGE}  # fmt: skip


def tool_fragment(arguments: str, call_id: str | None = None, name: str | None = None, index=0):
    call: dict = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        call.update(id=call_id, type="function")
        call["function"]["name"] = name
    return chunk({"tool_calls": [call]})


def events_of(chunks: list[dict], request: dict | None = None) -> list[dict]:
    stream = EventStream(Envelope(request or {"model": MODEL, "input": "x"}, store=False))
    events = [e for c in chunks for e in stream.feed(c)]
    return events + stream.finish()


TEXT = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello"}),
    chunk({"content": " there."}),
    chunk({}, "stop"),
    usage_chunk(),
]
MIXED = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Paris, "}),
    chunk({"reasoning_content": "then."}),
    chunk({"content": "Checking."}),
    tool_fragment('{"city": ', call_id="call_a", name="get_weather"),
    tool_fragment('"Paris"}'),
    tool_fragment('{"city": "Lyon"}', call_id="call_b", name="get_weather", index=1),
    chunk({}, "tool_calls"),
    usage_chunk(),
]


def test_a_text_stream_comes_in_openais_order_with_growing_sequence_numbers():
    events = events_of(TEXT)

    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-4]["text"] == "Hello there."
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["usage"]["total_tokens"] == 80
    assert final["output"][0]["content"][0]["text"] == "Hello there."
    assert events[0]["response"]["status"] == "in_progress"


def test_every_event_validates_against_openais_description():
    for event in events_of(MIXED) + events_of(TEXT):
        assert event_errors(event) == [], event["type"]
    assert response_errors(events_of(MIXED)[-1]["response"]) == []


def test_reasoning_text_and_two_tool_calls_stream_as_items_one_after_another():
    events = events_of(MIXED)

    added = [(e["output_index"], e["item"]["type"]) for e in events
             if e["type"] == "response.output_item.added"]  # fmt: skip
    assert added == [(0, "reasoning"), (1, "message"), (2, "function_call"), (3, "function_call")]
    kinds = [e["type"] for e in events]
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    args = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [(a["name"], a["arguments"]) for a in args] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_weather", '{"city": "Lyon"}'),
    ]
    final = events[-1]["response"]["output"]
    assert [i.get("call_id") for i in final[2:]] == ["call_a", "call_b"]


def test_an_answer_cut_at_its_limit_ends_with_response_incomplete():
    events = events_of([chunk({"content": "Lo"}), chunk({}, "length"), usage_chunk()])

    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_stream_the_engine_ended_without_a_chunk_is_still_one_empty_message():
    events = events_of([])

    assert [e["type"] for e in events][2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_a_broken_stream_ends_with_response_failed_keeping_what_was_done():
    stream = EventStream(Envelope({"model": MODEL, "input": "x"}, store=False))
    for c in TEXT[:2]:
        stream.feed(c)

    events = stream.fail("the engine broke off")

    assert [e["type"] for e in events][-2:] == ["response.output_item.done", "response.failed"]
    assert events[-1]["response"]["status"] == "failed"
    assert event_errors(events[-1]) == []


def test_the_sdk_rebuilds_from_the_stream_the_response_a_whole_answer_gives():
    whole = {
        "id": "c1",
        "object": "chat.completion",
        "model": "x",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "reasoning_content": "Paris, then.", "content": "Checking.",
            "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "call_b", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
            ]}}],
        "usage": USAGE,
    }  # fmt: skip
    seen = []

    def gateway(http_request: httpx2.Request) -> httpx2.Response:
        body = json.loads(http_request.content)
        seen.append(to_chat(body))
        envelope = Envelope(body, store=False)
        if not body.get("stream"):
            return httpx2.Response(200, json=from_chat(envelope, whole))
        data = b"".join(sse(e) for e in events_of(MIXED, body))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    client = openai.OpenAI(
        api_key="sk-test",
        base_url="http://gateway.test/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(gateway)),
    )
    ask = {"model": MODEL, "input": "Weather in Paris and Lyon?", "tools": [{
        "type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}  # fmt: skip
    answered = client.responses.create(**ask)
    with client.responses.stream(**ask) as stream:
        kinds = [event.type for event in stream]
        rebuilt = stream.get_final_response()

    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [i.type for i in rebuilt.output] == [i.type for i in answered.output]
    assert rebuilt.output_text == answered.output_text == "Checking."
    assert [(c.call_id, c.arguments) for c in rebuilt.output[2:]] == [
        (c.call_id, c.arguments) for c in answered.output[2:]
    ]
    assert rebuilt.usage == answered.usage
    assert seen[1]["stream_options"] == {"include_usage": True}


def test_the_fast_encoding_writes_the_same_bytes_as_one_event_at_a_time():
    events = events_of(MIXED) + events_of([chunk({"content": 'é "quoted"\n'}), usage_chunk()])

    assert encode(events) == b"".join(sse(e) for e in events)


class _Call:
    """What Relay uses of the gateway's Call: its send, and the overhead clock."""

    def __init__(self) -> None:
        self.clock = Clock(time.perf_counter())
        self.sent: list[dict] = []

    async def send(self, message: dict) -> None:
        self.sent.append(message)


def _engine_bytes(chunks: list[dict], sep: bytes) -> bytes:
    frames = [b"data: " + json.dumps(c).encode() for c in chunks] + [b"data: [DONE]"]
    return b"".join(f + sep for f in frames)


@pytest.mark.parametrize("sep", [b"\n\n", b"\r\n\r\n"])
@pytest.mark.parametrize("size", [1, 7, 4096])
async def test_the_relay_reads_an_engines_stream_however_its_bytes_are_cut(sep, size):
    call = _Call()
    relay = Relay(call, Envelope({"model": MODEL, "input": "x", "stream": True}, store=False))
    data = _engine_bytes(MIXED, sep)
    await relay.send({"type": "http.response.start", "status": 200,
                      "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
    for i in range(0, len(data), size):
        await relay.send({"type": "http.response.body", "body": data[i : i + size],
                          "more_body": True})  # fmt: skip
    await relay.send({"type": "http.response.body", "body": b""})

    body = b"".join(m.get("body", b"") for m in call.sent[1:])
    assert call.sent[0]["status"] == 200 and not call.sent[-1].get("more_body")
    assert body == b"".join(sse(e) for e in events_of_ids(body))
    assert relay.response["status"] == "completed"
    assert [i["type"] for i in relay.response["output"]] == [
        "reasoning", "message", "function_call", "function_call"]  # fmt: skip
    assert relay.response["usage"]["total_tokens"] == 80


def events_of_ids(body: bytes) -> list[dict]:
    """The events a client reads from the relay's bytes."""
    return [json.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: ")]
