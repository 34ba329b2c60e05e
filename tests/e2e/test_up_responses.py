"""The Responses API as a new user meets it: ``llmgw up`` serving the starter through the real
``llama-server``, and the official ``openai`` SDK's ``responses`` as the client.

The answers are gemma-3-270m's, so the tests look at shapes and at what the
gateway guarantees (a schema's JSON, the event order, what is stored and for
whom), never at what the model chose to say.
"""

from __future__ import annotations

import json

import openai
import pytest

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def _client(starter, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=starter.base_url, api_key=key or starter.key, max_retries=0)


def _project_key(starter, path: str, retention: str) -> str:
    starter.ctl_json("project", "create", "--parents", path)
    starter.ctl_json("project", "retention", path, retention)
    return starter.ctl_json("keys", "create", "--project", path)["secret"]


def test_a_string_input_gets_a_response_the_sdk_reads(starter_gateway):
    starter = starter_gateway
    with _client(starter) as client:
        response = client.responses.create(
            model=starter.model,
            input="Say hello.",
            instructions="Answer in one short sentence.",
            max_output_tokens=16,
            temperature=0,
        )

    assert response.object == "response" and response.model == starter.model
    assert response.status in ("completed", "incomplete") and response.store is False
    assert response.output[0].type == "message" and response.output_text
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


def test_item_input_with_a_function_call_and_its_output_is_answered(starter_gateway):
    starter = starter_gateway
    with _client(starter) as client:
        response = client.responses.create(
            model=starter.model,
            tools=[WEATHER],
            max_output_tokens=24,
            temperature=0,
            input=[
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": '{"city": "Paris"}'},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
            ],
        )  # fmt: skip

    assert response.status in ("completed", "incomplete")
    assert [i.type for i in response.output if i.type == "message"] or any(
        i.type == "function_call" for i in response.output
    )
    assert response.tools[0].name == "get_weather"


def test_a_json_schema_text_format_answers_json_of_that_schema(starter_gateway):
    starter = starter_gateway
    # Values from a list keep the answer short whatever the small model makes of it:
    # llama.cpp's grammar bounds the whitespace between tokens, an enum bounds the rest.
    schema = {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Lyon"]}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    with _client(starter) as client:
        response = client.responses.create(
            model=starter.model,
            input="Paris is sunny today. Give the city and whether it is sunny, as JSON.",
            text={"format": {"type": "json_schema", "name": "weather", "schema": schema,
                             "strict": True}},
            max_output_tokens=400,
            temperature=0,
        )  # fmt: skip

    assert response.status == "completed", response.incomplete_details
    answer = json.loads(response.output_text)
    assert set(answer) == {"city", "sunny"}
    assert answer["city"] in ("Paris", "Lyon") and isinstance(answer["sunny"], bool)
    assert response.text.format.type == "json_schema"


def test_a_stream_comes_as_events_the_sdk_parses_in_openais_order(starter_gateway):
    starter = starter_gateway
    with _client(starter) as client:
        events = list(
            client.responses.create(
                model=starter.model, input="Count to five.", max_output_tokens=16, stream=True
            )
        )
        # The SDK's own accumulator checks each event against those before it (order,
        # items' identities) and raises on one out of place. (Its get_final_response wants
        # response.completed, and the small model's answers run to the limit: incomplete.)
        with client.responses.stream(
            model=starter.model, input="Count to three.", max_output_tokens=12
        ) as stream:
            helped = list(stream)

    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert "response.output_text.delta" in kinds
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        kinds[-1],
    ] and kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens > 0
    assert helped[0].type == "response.created"
    assert helped[-1].type in ("response.completed", "response.incomplete")
    texts = [e.snapshot for e in helped if e.type == "response.output_text.delta"]
    assert texts and texts[-1] == helped[-1].response.output_text


def test_without_retention_stored_responses_are_refused_naming_the_setting(starter_gateway):
    starter = starter_gateway
    with _client(starter) as client:
        for ask in (
            lambda: client.responses.create(
                model=starter.model, input="x", previous_response_id="resp_x"
            ),
            lambda: client.responses.create(model=starter.model, input="x", store=True),
            lambda: client.responses.retrieve("resp_x"),
        ):
            with pytest.raises(openai.BadRequestError) as refused:
                ask()
            assert "retain_responses" in refused.value.message
            assert "llmgw ctl project retention local/default/default" in refused.value.message


def test_with_retention_a_conversation_continues_and_is_read_back_and_deleted(starter_gateway):
    starter = starter_gateway
    key = _project_key(starter, "Resp/e2e/kept", "1h")
    other = _project_key(starter, "Resp/e2e/other", "1h")
    with _client(starter, key) as client, _client(starter, other) as stranger:
        first = client.responses.create(
            model=starter.model, input="My name is Ada.", store=True, max_output_tokens=12
        )
        assert first.store is True
        second = client.responses.create(
            model=starter.model,
            input="What is my name?",
            previous_response_id=first.id,
            store=True,
            max_output_tokens=12,
        )
        assert second.previous_response_id == first.id
        # The second answer was made with the first turn before it: more tokens in.
        assert second.usage.input_tokens > first.usage.input_tokens

        got = client.responses.retrieve(first.id)
        assert got.id == first.id and got.output_text == first.output_text
        items = client.responses.input_items.list(second.id)
        assert [i.type for i in items.data] == ["message"]
        assert items.data[0].content[0].text == "What is my name?"

        with pytest.raises(openai.NotFoundError):
            stranger.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            stranger.responses.create(model=starter.model, input="x", previous_response_id=first.id)
        with pytest.raises(openai.NotFoundError):
            stranger.responses.delete(first.id)

        client.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)
