"""The Responses API over chat completions: requests in, Response objects out, errors naming fields."""

from __future__ import annotations

import pytest

from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.protocol.responses.answer import Envelope, from_chat
from gatewayd.gateway.protocol.responses.handler import input_record
from gatewayd.gateway.protocol.responses.request import check, to_chat
from tests.gatewayd.gateway.openapi_check import response_errors

MODEL = "gemma-3-270m"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def completion(message: dict, finish_reason: str = "stop", **usage) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "served-name",
        "choices": [{"index": 0, "message": {"role": "assistant", **message},
                     "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, **usage},
    }  # fmt: skip


def test_a_string_input_with_instructions_becomes_a_system_and_a_user_message():
    chat = to_chat(
        {
            "model": MODEL,
            "input": "Hello?",
            "instructions": "Be brief.",
            "max_output_tokens": 16,
            "temperature": 0.2,
            "top_p": 0.9,
        }
    )

    assert chat == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello?"},
        ],
        "max_tokens": 16,
        "temperature": 0.2,
        "top_p": 0.9,
    }


def test_items_with_a_function_call_and_its_output_become_tool_calls_then_a_tool_message():
    chat = to_chat(
        {
            "model": MODEL,
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "input": [
                {"role": "developer", "content": "Use the tools."},
                {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "Weather in "},
                             {"type": "input_text", "text": "Paris?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": '{"city": "Paris"}'},
                {"type": "function_call", "call_id": "call_2", "name": "get_weather",
                 "arguments": '{"city": "Lyon"}'},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2",
                 "output": [{"type": "input_text", "text": "rain"}]},
            ],
        }
    )  # fmt: skip

    assert chat["messages"] == [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
    ]  # fmt: skip
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER["parameters"],
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_a_json_schema_text_format_becomes_chats_response_format():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    chat = to_chat(
        {
            "model": MODEL,
            "input": "A number?",
            "text": {"format": {"type": "json_schema", "name": "num", "schema": schema,
                                "strict": True}},
        }
    )  # fmt: skip

    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "num", "schema": schema, "strict": True},
    }


def test_a_stream_asks_the_engine_for_its_usage_and_effort_reaches_the_engine():
    chat = to_chat({"model": MODEL, "input": "x", "stream": True, "reasoning": {"effort": "low"}})

    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["reasoning_effort"] == "low"


def test_a_stored_conversation_goes_before_the_new_input():
    history = input_record([{"role": "user", "content": "My name is Ada."}]) + [
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hello Ada.", "annotations": []}]},
        {"id": "rs_1", "type": "reasoning", "summary": []},
    ]  # fmt: skip

    chat = to_chat({"model": MODEL, "input": "My name?"}, history)

    assert chat["messages"] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "My name?"},
    ]


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"input": 5}, "input"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
         "input[0].content[0].type"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "x", "tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}},
         "text.format.schema"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "x", "temperature": 3}, "temperature"),
    ],
)  # fmt: skip
def test_a_request_that_cannot_be_served_is_refused_naming_the_field(request_fields, field):
    with pytest.raises(ApiError) as refused:
        to_chat({"model": MODEL, **request_fields})

    assert refused.value.status == 400 and refused.value.param == field
    assert field in refused.value.message


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [({}, "input"), ({"input": "x", "background": True}, "background"),
     ({"input": "x", "store": "yes"}, "store")],
)  # fmt: skip
def test_fields_outside_the_input_are_checked_first(request_fields, field):
    with pytest.raises(ApiError) as refused:
        check({"model": MODEL, **request_fields})

    assert refused.value.param == field


def test_a_text_answer_is_a_response_object_the_schema_accepts():
    request = {"model": MODEL, "input": "Hi", "tools": [WEATHER], "metadata": {"a": "b"}}
    response = from_chat(Envelope(request, store=False), completion({"content": "Hello."}))

    assert response["object"] == "response" and response["status"] == "completed"
    assert response["model"] == MODEL and response["store"] is False
    assert response["output"][0]["content"][0]["text"] == "Hello."
    assert response["usage"]["input_tokens"] == 7 and response["usage"]["total_tokens"] == 10
    assert response["tools"][0]["strict"] is True and response["metadata"] == {"a": "b"}
    assert response_errors(response) == []


def test_reasoning_text_and_tool_calls_come_back_as_items_in_the_models_order():
    answer = completion(
        {
            "reasoning_content": "Paris it is.",
            "content": "Checking.",
            "tool_calls": [{"id": "call_a", "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}],
        },
        "tool_calls",
        completion_tokens_details={"reasoning_tokens": 2},
    )  # fmt: skip
    response = from_chat(Envelope({"model": MODEL, "input": "x"}, store=False), answer)

    assert [i["type"] for i in response["output"]] == ["reasoning", "message", "function_call"]
    assert response["output"][0]["content"] == [{"type": "reasoning_text", "text": "Paris it is."}]
    call = response["output"][2]
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_a",
        "get_weather",
        '{"city":"Paris"}',
    )
    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": 2}
    assert response_errors(response) == []


def test_an_answer_cut_at_its_limit_is_incomplete_for_max_output_tokens():
    response = from_chat(
        Envelope({"model": MODEL, "input": "x"}, store=False),
        completion({"content": "Lo"}, "length"),
    )

    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response_errors(response) == []
