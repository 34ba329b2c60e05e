"""Anthropic's Messages API over OpenAI chat completions: requests, answers, streams, errors.

The shapes are checked by the official SDKs: answers and events are validated
with ``anthropic.types``, the engine's chunks with ``openai.types``, and the
round trips run the Anthropic SDK against a gateway made of these functions
behind ``httpx2.MockTransport`` (the SDK's
own HTTP client, which refuses httpx's).
"""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter

from gatewayd.gateway.protocol.anthropic import chat_to_message, error_body
from gatewayd.gateway.protocol.anthropic_request import (
    AnthropicRequestError,
    messages_to_chat,
    wants_thinking,
)
from gatewayd.gateway.protocol.anthropic_stream import StreamConverter, anthropic_sse, sse_encode

EVENT = TypeAdapter(anthropic.types.RawMessageStreamEvent)
MODEL = "qwen3-8b"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather now in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def request(**fields) -> dict:
    return {
        "model": MODEL,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Hello"}],
        **fields,
    }


# --- what an engine (vLLM) answers -----------------------------------------------------


def completion(
    message: dict, finish_reason: str = "stop", usage: dict | None = None, **choice
) -> dict:
    answer = {
        "id": "chatcmpl-9b1f",
        "object": "chat.completion",
        "created": 1761800000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, **message},
                "logprobs": None,
                "finish_reason": finish_reason,
                **choice,
            }
        ],
        "usage": usage or {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30},
    }
    ChatCompletion.model_validate(answer)
    return answer


def chunk(delta: dict | None = None, finish_reason: str | None = None, **choice) -> dict:
    data = {
        "id": "chatcmpl-9b1f",
        "object": "chat.completion.chunk",
        "created": 1761800000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "delta": delta or {},
                "logprobs": None,
                "finish_reason": finish_reason,
                **choice,
            }
        ],
    }
    ChatCompletionChunk.model_validate(data)
    return data


def usage_chunk(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None):
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    data = {
        "id": "chatcmpl-9b1f",
        "object": "chat.completion.chunk",
        "created": 1761800000,
        "model": MODEL,
        "choices": [],
        "usage": usage,
    }
    ChatCompletionChunk.model_validate(data)
    return data


def tool_fragment(
    index: int, arguments: str, *, call_id: str | None = None, name: str | None = None
) -> dict:
    call: dict = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        call.update(id=call_id, type="function")
        call["function"]["name"] = name
    return chunk({"tool_calls": [call]})


def converted(chunks: list[dict], **options) -> list[tuple[str, dict]]:
    """The events for a whole stream, each checked to be one the SDK knows."""
    converter = StreamConverter(MODEL, **options)
    events = [event for data in chunks for event in converter.feed(data)]
    events += converter.finish()
    for name, data in events:
        assert name == data["type"]
        EVENT.validate_python(data)
    return events


def shape(events: list[tuple[str, dict]]) -> list[tuple]:
    """Each event's name, with its block's index and delta type where it has them."""
    out = []
    for name, data in events:
        if name == "content_block_start":
            out.append((name, data["index"], data["content_block"]["type"]))
        elif name == "content_block_delta":
            out.append((name, data["index"], data["delta"]["type"]))
        elif name == "content_block_stop":
            out.append((name, data["index"]))
        else:
            out.append((name,))
    return out


# --- requests ------------------------------------------------------------------------


def test_a_text_request_keeps_its_sampling_settings_and_names_its_user():
    chat = messages_to_chat(
        request(
            temperature=0.2,
            top_p=0.9,
            top_k=40,
            stop_sequences=["\n\nHuman:"],
            metadata={"user_id": "u-42"},
            service_tier="auto",
        )
    )
    assert chat == {
        "model": MODEL,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Hello"}],
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["\n\nHuman:"],
        "user": "u-42",
    }


def test_a_system_prompt_given_as_text_blocks_becomes_one_system_message_first():
    system = [
        {"type": "text", "text": "You are terse."},
        {"type": "text", "text": "Answer in French.", "cache_control": {"type": "ephemeral"}},
    ]
    chat = messages_to_chat(request(system=system))
    assert chat["messages"][0] == {"role": "system", "content": "You are terse.\nAnswer in French."}
    assert messages_to_chat(request(system="Be kind."))["messages"][0] == {
        "role": "system",
        "content": "Be kind.",
    }


def test_pictures_in_base64_or_by_address_become_image_url_parts():
    content = [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.org/cat.jpg"}},
        {"type": "text", "text": "Which is the cat?"},
    ]
    chat = messages_to_chat(request(messages=[{"role": "user", "content": content}]))
    assert chat["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.org/cat.jpg"}},
                {"type": "text", "text": "Which is the cat?"},
            ],
        }
    ]


def test_a_tool_round_trip_becomes_tool_calls_then_tool_messages():
    chat = messages_to_chat(
        request(
            tools=[WEATHER_TOOL],
            messages=[
                {"role": "user", "content": "Weather in Paris and Oslo?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Looking it up."},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                        {
                            "type": "tool_use",
                            "id": "toolu_2",
                            "name": "get_weather",
                            "input": {"city": "Oslo"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C, sunny"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "is_error": True,
                            "content": [{"type": "text", "text": "station offline"}],
                        },
                        {"type": "text", "text": "And tomorrow?"},
                    ],
                },
            ],
        )
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather now in a city.",
                "parameters": WEATHER_TOOL["input_schema"],
            },
        }
    ]
    assert chat["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Looking it up.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        # OpenAI wants the tool answers right after the calls, the user's words after.
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18°C, sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "station offline"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    # A turn of tool calls alone has no text, which OpenAI wants as null.
    chat = messages_to_chat(
        request(
            messages=[
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
                    ],
                }
            ]
        )
    )
    assert chat["messages"][0]["content"] is None


def test_a_picture_returned_by_a_tool_follows_its_tool_message_in_a_user_turn():
    # An OpenAI tool message carries text only: the picture would be lost there.
    picture = {"type": "image", "source": {"type": "url", "url": "https://example.org/p.png"}}
    chat = messages_to_chat(
        request(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "screenshot taken"}, picture],
                        },
                    ],
                }
            ]
        )
    )
    assert chat["messages"] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "screenshot taken"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://example.org/p.png"}}],
        },
    ]


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        (
            {"type": "tool", "name": "get_weather"},
            {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        ),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "auto", "disable_parallel_tool_use": True},
            {"tool_choice": "auto", "parallel_tool_calls": False},
        ),
    ],
)
def test_tool_choice_takes_openais_names(tool_choice, expected):
    chat = messages_to_chat(request(tools=[WEATHER_TOOL], tool_choice=tool_choice))
    assert {key: chat[key] for key in expected} == expected
    assert ("parallel_tool_calls" in chat) == ("parallel_tool_calls" in expected)


def test_a_streamed_request_asks_the_engine_for_its_usage():
    # Without include_usage an engine never says what a stream cost.
    chat = messages_to_chat(request(stream=True))
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}
    assert "stream" not in messages_to_chat(request(stream=False))


@pytest.mark.parametrize(
    ("thinking", "template", "wanted"),
    [
        (
            {"type": "enabled", "budget_tokens": 2048},
            {"enable_thinking": True, "thinking_budget": 2048},
            True,
        ),
        ({"type": "adaptive"}, {"enable_thinking": True}, True),
        ({"type": "disabled"}, {"enable_thinking": False}, False),
        (None, None, False),
    ],
)
def test_thinking_reaches_the_chat_template_only_when_the_client_says(thinking, template, wanted):
    body = request(thinking=thinking) if thinking else request()
    assert messages_to_chat(body).get("chat_template_kwargs") == template
    assert wants_thinking(body) is wanted


def test_thinking_sent_back_in_the_history_is_dropped():
    # Claude Code sends its earlier thinking back with every tool result.
    chat = messages_to_chat(
        request(
            messages=[
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "thinking",
                            "thinking": "I should call the tool.",
                            "signature": "abc",
                        },
                        {"type": "redacted_thinking", "data": "opaque"},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C"}
                    ],
                },
            ]
        )
    )
    assert chat["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }


def test_an_assistant_turn_last_is_continued_rather_than_answered():
    # Without it vLLM opens a new turn after the prefill and the JSON starts over.
    chat = messages_to_chat(
        request(
            messages=[
                {"role": "user", "content": "Give me JSON."},
                {"role": "assistant", "content": "{"},
            ]
        )
    )
    assert chat["continue_final_message"] is True
    assert chat["add_generation_prompt"] is False
    assert "continue_final_message" not in messages_to_chat(request())


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"max_tokens": 10, "messages": []}, "model", "model is missing"),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
            "max_tokens",
            "max_tokens is missing",
        ),
        ({"model": MODEL, "max_tokens": 10}, "messages", "messages is missing"),
        (request(max_tokens="10"), "max_tokens", "must be an integer, not a string"),
        (request(max_tokens=True), "max_tokens", "must be an integer, not true or false"),
        (request(messages="hi"), "messages", "must be a list"),
        (request(messages=[]), "messages", "at least one user turn"),
        (request(temperature="hot"), "temperature", "must be a number, not a string"),
        (request(messages=[{"role": "robot", "content": "hi"}]), "messages[0].role", "'robot'"),
        (request(messages=[{"role": "user"}]), "messages[0].content", "not null"),
        (request(messages=[{"role": "user", "content": []}]), "messages[0].content", "empty"),
        (
            request(messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]),
            "messages[0].content[0].type",
            "not 'video'",
        ),
        (
            request(messages=[{"role": "user", "content": [{"text": "no type"}]}]),
            "messages[0].content[0].type",
            "is missing",
        ),
        (
            request(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "file", "file_id": "file_1"}}
                        ],
                    }
                ]
            ),
            "messages[0].content[0].source.type",
            "send them as base64 or url",
        ),
        (
            request(
                messages=[{"role": "user", "content": [{"type": "tool_result", "content": "18°C"}]}]
            ),
            "messages[0].content[0].tool_use_id",
            "is missing",
        ),
        (
            request(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
            "tools[0].type",
            "run it yourself",
        ),
        (request(tools=[{"name": "get_weather"}]), "tools[0].input_schema", "is missing"),
        (request(tool_choice={"type": "sometimes"}), "tool_choice.type", "'sometimes'"),
        (request(thinking={"type": "enabled"}), "thinking.budget_tokens", "is missing"),
        (request(stop_sequences=["ok", 3]), "stop_sequences[1]", "must be a string"),
        (request(system=[{"type": "image", "source": {}}]), "system[0].type", "text blocks only"),
    ],
)
def test_a_request_that_cannot_be_served_is_refused_naming_the_field(body, field, words):
    with pytest.raises(AnthropicRequestError) as refused:
        messages_to_chat(body)
    assert refused.value.field == field
    assert field in refused.value.message and words in refused.value.message
    assert refused.value.body()["error"]["type"] == "invalid_request_error"


# --- whole answers -------------------------------------------------------------------


def test_a_text_answer_is_a_message_the_sdk_accepts_with_cache_reads_apart():
    answer = completion(
        {"content": "Bonjour."},
        usage={
            "prompt_tokens": 120,
            "completion_tokens": 4,
            "total_tokens": 124,
            "prompt_tokens_details": {"cached_tokens": 100},
        },
    )
    message = anthropic.types.Message.model_validate(chat_to_message(answer, model="my-model"))
    assert message.id == "msg_9b1f" and message.model == "my-model"
    assert [block.model_dump(exclude_none=True) for block in message.content] == [
        {"type": "text", "text": "Bonjour."}
    ]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    # Anthropic counts cache reads apart from input_tokens; OpenAI counts them in.
    assert (
        message.usage.input_tokens,
        message.usage.cache_read_input_tokens,
        message.usage.output_tokens,
    ) == (20, 100, 4)


def test_reasoning_text_and_tool_calls_come_back_in_anthropics_block_order():
    answer = completion(
        {
            "content": "Let me check.",
            "reasoning_content": "The user wants the weather.",
            "tool_calls": [
                {
                    "id": "chatcmpl-tool-1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        finish_reason="tool_calls",
    )
    message = anthropic.types.Message.model_validate(chat_to_message(answer, model=MODEL))
    thinking, text, tool_use = message.content
    assert thinking.type == "thinking" and thinking.thinking == "The user wants the weather."
    assert thinking.signature
    assert text.type == "text" and text.text == "Let me check."
    assert (tool_use.type, tool_use.id, tool_use.name, tool_use.input) == (
        "tool_use",
        "chatcmpl-tool-1",
        "get_weather",
        {"city": "Paris"},
    )
    assert message.stop_reason == "tool_use"


def test_reasoning_is_left_out_when_thinking_was_not_asked_for():
    answer = completion({"content": "42", "reasoning": "Six times seven."})
    assert [block["type"] for block in chat_to_message(answer, model=MODEL)["content"]] == [
        "thinking",
        "text",
    ]
    assert chat_to_message(answer, model=MODEL, include_thinking=False)["content"] == [
        {"type": "text", "text": "42"}
    ]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"city": "Par', {"_raw": '{"city": "Par'}),
        ('["Paris"]', {"_raw": '["Paris"]'}),
        ("", {}),
    ],
)
def test_tool_arguments_that_are_not_a_json_object_are_kept_under_raw(arguments, expected):
    answer = completion(
        {
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ]
        },
        finish_reason="tool_calls",
    )
    message = anthropic.types.Message.model_validate(chat_to_message(answer, model=MODEL))
    assert message.content[0].input == expected


@pytest.mark.parametrize(
    ("finish_reason", "choice", "tool_calls", "expected"),
    [
        ("stop", {}, False, ("end_turn", None)),
        ("stop", {"stop_reason": "</answer>"}, False, ("stop_sequence", "</answer>")),
        # vLLM names a stop token by its id: that is the end of a turn, not a sequence.
        ("stop", {"stop_reason": 151645}, False, ("end_turn", None)),
        ("length", {}, False, ("max_tokens", None)),
        ("length", {}, True, ("max_tokens", None)),
        ("tool_calls", {}, True, ("tool_use", None)),
        # vLLM ends a call forced by a named tool_choice with "stop".
        ("stop", {}, True, ("tool_use", None)),
        ("content_filter", {}, False, ("refusal", None)),
    ],
)
def test_finish_reasons_become_anthropics_stop_reasons(finish_reason, choice, tool_calls, expected):
    message = {"content": "ok"}
    if tool_calls:
        message["tool_calls"] = [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]
    answer = completion(message, finish_reason, **choice)
    converted_message = chat_to_message(answer, model=MODEL)
    assert (converted_message["stop_reason"], converted_message["stop_sequence"]) == expected
    anthropic.types.Message.model_validate(converted_message)


# --- streams -------------------------------------------------------------------------


def test_a_text_stream_opens_one_block_and_ends_with_the_usage():
    events = converted(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Bon"}),
            chunk({"content": "jour."}),
            chunk({}, "stop"),
            usage_chunk(120, 4, cached_tokens=100),
        ]
    )
    assert shape(events) == [
        ("message_start",),
        ("content_block_start", 0, "text"),
        ("content_block_delta", 0, "text_delta"),
        ("content_block_delta", 0, "text_delta"),
        ("content_block_stop", 0),
        ("message_delta",),
        ("message_stop",),
    ]
    start, delta = events[0][1], events[-2][1]
    assert start["message"]["id"] == "msg_9b1f"
    assert start["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {
        "input_tokens": 20,
        "output_tokens": 4,
        "cache_read_input_tokens": 100,
    }


def test_reasoning_then_text_streams_as_a_signed_thinking_block_then_a_text_block():
    events = converted(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning_content": "Six times "}),
            chunk({"reasoning_content": "seven."}),
            chunk({"content": "42"}),
            chunk({}, "stop"),
            usage_chunk(12, 7),
        ]
    )
    assert shape(events) == [
        ("message_start",),
        ("content_block_start", 0, "thinking"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"),
        # The signature closes the thinking, before the text begins.
        ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0),
        ("content_block_start", 1, "text"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1),
        ("message_delta",),
        ("message_stop",),
    ]
    without = converted(
        [chunk({"reasoning": "hidden"}), chunk({"content": "42"})], include_thinking=False
    )
    assert [
        data["content_block"]["type"] for name, data in without if name == "content_block_start"
    ] == ["text"]


def test_tool_call_fragments_stream_as_input_json_deltas_of_their_own_blocks():
    events = converted(
        [
            chunk({"role": "assistant", "content": "Checking."}),
            tool_fragment(0, "", call_id="call_a", name="get_weather"),
            tool_fragment(0, '{"city": '),
            tool_fragment(0, '"Paris"}'),
            tool_fragment(1, '{"city": "Oslo"}', call_id="call_b", name="get_weather"),
            chunk({}, "tool_calls"),
            usage_chunk(50, 30),
        ]
    )
    assert shape(events) == [
        ("message_start",),
        ("content_block_start", 0, "text"),
        ("content_block_delta", 0, "text_delta"),
        ("content_block_stop", 0),
        ("content_block_start", 1, "tool_use"),
        ("content_block_delta", 1, "input_json_delta"),
        ("content_block_delta", 1, "input_json_delta"),
        ("content_block_stop", 1),
        ("content_block_start", 2, "tool_use"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2),
        ("message_delta",),
        ("message_stop",),
    ]
    assert events[4][1]["content_block"] == {
        "type": "tool_use",
        "id": "call_a",
        "name": "get_weather",
        "input": {},
    }
    assert (
        "".join(
            data["delta"]["partial_json"]
            for name, data in events
            if name == "content_block_delta" and data["index"] == 1
        )
        == '{"city": "Paris"}'
    )
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_a_stream_the_engine_ended_without_a_chunk_still_ends_as_a_whole_message():
    converter = StreamConverter(MODEL)
    events = converter.finish()
    assert [name for name, _ in events] == ["message_start", "message_delta", "message_stop"]
    for _, data in events:
        EVENT.validate_python(data)
    assert converter.finish() == []


def test_the_sdk_rebuilds_from_the_stream_the_message_a_whole_answer_gives():
    # The same answer, whole and streamed, must reach a client as the same message.
    whole = completion(
        {
            "reasoning_content": "Paris, then.",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        "tool_calls",
        usage={"prompt_tokens": 50, "completion_tokens": 30, "total_tokens": 80},
    )
    streamed = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "Paris, "}),
        chunk({"reasoning_content": "then."}),
        chunk({"content": "Checking."}),
        tool_fragment(0, '{"city": ', call_id="call_a", name="get_weather"),
        tool_fragment(0, '"Paris"}'),
        chunk({}, "tool_calls"),
        usage_chunk(50, 30),
    ]
    seen: list[dict] = []

    def gateway(http_request: httpx2.Request) -> httpx2.Response:
        body = json.loads(http_request.content)
        chat = messages_to_chat(body)
        seen.append(chat)
        if not chat.get("stream"):
            return httpx2.Response(200, json=chat_to_message(whole, model=body["model"]))
        converter = StreamConverter(body["model"], include_thinking=wants_thinking(body))
        events = [event for data in streamed for event in converter.feed(data)]
        events += converter.finish()
        return httpx2.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=b"".join(sse_encode(*event) for event in events),
        )

    client = anthropic.Anthropic(
        api_key="sk-test",
        base_url="http://gateway.test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(gateway)),
    )
    ask = {
        "model": MODEL,
        "max_tokens": 512,
        "tools": [WEATHER_TOOL],
        "thinking": {"type": "enabled", "budget_tokens": 256},
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    }
    answered = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        rebuilt = stream.get_final_message()

    assert rebuilt.model_dump() == answered.model_dump()
    assert [block.type for block in rebuilt.content] == ["thinking", "text", "tool_use"]
    assert rebuilt.content[2].input == {"city": "Paris"}
    assert (rebuilt.usage.input_tokens, rebuilt.usage.output_tokens) == (50, 30)
    assert seen[1]["stream_options"] == {"include_usage": True}


def test_the_sdk_shows_the_field_a_request_was_refused_for():
    def gateway(http_request: httpx2.Request) -> httpx2.Response:
        try:
            messages_to_chat(json.loads(http_request.content))
        except AnthropicRequestError as refused:
            return httpx2.Response(refused.status, json=refused.body())
        raise AssertionError("the request should have been refused")

    client = anthropic.Anthropic(
        api_key="sk-test",
        base_url="http://gateway.test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(gateway)),
    )
    with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[0\]\.type"):
        client.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}],
        )


def test_sse_encode_writes_anthropics_event_framing():
    assert sse_encode("message_stop", {"type": "message_stop"}) == (
        b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    )


async def test_the_async_adapter_encodes_every_event_of_an_engine_stream():
    async def engine():
        for data in (chunk({"content": "Hi"}), chunk({}, "stop"), usage_chunk(3, 1)):
            yield data

    frames = [frame async for frame in anthropic_sse(engine(), StreamConverter(MODEL))]
    assert [frame.split(b"\n", 1)[0] for frame in frames] == [
        b"event: message_start",
        b"event: content_block_start",
        b"event: content_block_delta",
        b"event: content_block_stop",
        b"event: message_delta",
        b"event: message_stop",
    ]


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
    ],
)
def test_an_error_takes_anthropics_type_for_its_status(status, kind):
    body = error_body(status, "no replica of qwen3-8b is ready; retry in 10 s")
    assert body == {
        "type": "error",
        "error": {"type": kind, "message": "no replica of qwen3-8b is ready; retry in 10 s"},
    }
    if kind != "request_too_large":  # Anthropic documents it; the SDK's types lack it
        anthropic.types.shared.ErrorResponse.model_validate(body)
