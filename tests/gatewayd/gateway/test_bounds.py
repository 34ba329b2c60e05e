"""Request fields past the bounds OpenAI's and Anthropic's APIs publish are refused at the edge."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import anthropic
import openai
import pytest

from gatewayd.gateway.protocol import bounds
from gatewayd.gateway.protocol.bounds import openai_table
from gatewayd.gateway.protocol.errors import ApiError
from tests.gatewayd.gateway.engine_fake import CountingEngine, gateway_before
from tests.gatewayd.gateway.openapi_check import schema_errors

ROOT = Path(__file__).resolve().parents[3]
COPY = ROOT / "tests/fixtures/openai/openapi.json"
USER = [{"role": "user", "content": "hello"}]


def _script():
    spec = importlib.util.spec_from_file_location(
        "openai_bounds", ROOT / "scripts/openai_bounds.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the table ---------------------------------------------------------------------


def test_the_table_in_the_code_is_what_the_script_makes_of_openais_description():
    # Guards a table that drifts from the description: a bound OpenAI adds or moves
    # would otherwise go unchecked (or a bound it drops keep refusing requests).
    script = _script()
    made = script.render(script.derive(script.load(COPY)))
    text = script.TABLE.read_text(encoding="utf-8")
    assert script._block(text) == made, "run python scripts/openai_bounds.py --write"
    assert openai_table.OPENAI == script.derive(script.load(COPY))


def test_the_table_holds_the_bounds_the_issue_found_unchecked():
    table = openai_table.OPENAI
    assert table["CreateCompletionRequest"]["logprobs"] == {"integer": {"minimum": 0, "maximum": 5}}
    assert table["CreateChatCompletionRequest"]["top_logprobs"] == {
        "integer": {"minimum": 0, "maximum": 20}
    }
    assert table["CreateEmbeddingRequest"]["input"]["array"]["maxItems"] == 2048


def test_every_bound_left_out_is_one_the_description_has_and_says_why():
    for (schema, field, kind, key), why in openai_table.NOT_APPLIED.items():
        assert key in openai_table.OPENAI[schema][field][kind], (schema, field, kind, key)
        assert len(why) > 40
        assert key not in bounds.APPLIED[schema][field][kind]


def test_a_long_list_of_token_ids_is_checked_in_about_a_millisecond():
    import time

    ids = list(range(2048))
    started = time.perf_counter()
    for _ in range(100):
        bounds.check("/v1/embeddings", {"model": "m", "input": ids})
    assert (time.perf_counter() - started) / 100 < 0.002


@pytest.mark.parametrize(
    ("path", "request_", "param", "code"),
    [
        ("/v1/completions", {"prompt": "x", "logprobs": 6}, "logprobs", "invalid_value"),
        ("/v1/completions", {"prompt": "x", "logprobs": True}, "logprobs", "invalid_type"),
        ("/v1/completions", {"prompt": "x", "best_of": 21}, "best_of", "invalid_value"),
        ("/v1/chat/completions", {"messages": USER, "top_logprobs": -1}, "top_logprobs", None),
        ("/v1/chat/completions", {"messages": USER, "stop": list("abcde")}, "stop", None),
        ("/v1/chat/completions", {"messages": USER, "service_tier": "best"}, "service_tier", None),
        ("/v1/chat/completions", {"messages": USER, "modalities": ["smell"]}, "modalities[0]", None),
        ("/v1/chat/completions", {"messages": USER, "safety_identifier": "u" * 65},
         "safety_identifier", None),
        ("/v1/embeddings", {"input": [[1, 2], []]}, "input[1]", None),
        ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}, "encoding_format", None),
        ("/v1/responses", {"input": "x", "top_logprobs": 21}, "top_logprobs", None),
        ("/v1/responses", {"input": "x", "include": ["everything"]}, "include[0]", None),
    ],
)  # fmt: skip
def test_a_value_outside_the_description_is_a_400_naming_the_field(path, request_, param, code):
    with pytest.raises(ApiError) as err:
        bounds.check(path, {"model": "m", **request_})
    assert err.value.status == 400 and err.value.param == param
    assert err.value.code == (code or "invalid_value")


@pytest.mark.parametrize(
    ("path", "request_"),
    [
        ("/v1/completions", {"prompt": "x", "logprobs": 5, "best_of": 20, "n": 128}),
        ("/v1/completions", {"prompt": [[1, 2], [3]], "stop": ["a", "b", "c", "d"]}),
        ("/v1/chat/completions", {"messages": USER, "top_logprobs": 20, "logprobs": True}),
        ("/v1/chat/completions", {"messages": USER, "temperature": 2.0, "seed": -(2**63)}),
        ("/v1/chat/completions", {"messages": USER, "tool_choice": {"type": "function"}}),
        ("/v1/chat/completions", {"messages": USER, "top_logprobs": None, "stop": None}),
        ("/v1/embeddings", {"input": list(range(2048)), "dimensions": 8}),
        ("/v1/responses", {"input": "x", "top_logprobs": 0, "max_output_tokens": 5}),
        # Fields the description does not bound, or does not have, pass untouched.
        ("/v1/chat/completions", {"messages": USER, "top_k": "anything"}),
    ],
)
def test_values_within_the_description_pass(path, request_):
    bounds.check(path, {"model": "m", **request_})


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        ({"temperature": 1.5}, "temperature"),
        ({"top_p": -0.1}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "thinking.budget_tokens"),
    ],
)
def test_a_messages_request_past_anthropics_documented_bounds_is_refused(request_, param):
    body = {"model": "m", "max_tokens": 2048, "messages": USER, **request_}
    with pytest.raises(ApiError) as err:
        bounds.check_messages(body)
    assert err.value.status == 400 and err.value.param == param


def test_a_token_count_has_no_max_tokens_for_its_thinking_budget_to_stay_below():
    body = {"model": "m", "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 4096}}
    bounds.check_messages(body, counting=True)
    with pytest.raises(ApiError):
        bounds.check_messages({**body, "thinking": {"type": "enabled", "budget_tokens": 10}})


# ---- through the gateway, with the official SDKs -------------------------------------


def _conforms(response) -> dict:
    body = response.json()
    assert schema_errors(body, "ErrorResponse") == []
    return body["error"]


async def test_logprobs_past_5_is_refused_before_the_engine_is_asked(tmp_path):
    # Guards the issue's case: "logprobs": 213450922 went to llama.cpp, which spent 32 s
    # writing 125 MB of the whole vocabulary's log-probabilities.
    async with CountingEngine().running() as engine, gateway_before(tmp_path, engine) as front:
        with pytest.raises(openai.BadRequestError) as err:
            await front.openai.completions.create(
                model="chat", prompt="hello", max_tokens=1, logprobs=213450922
            )
        error = _conforms(err.value.response)
        assert error["param"] == "logprobs" and "at most 5" in error["message"]
        assert error["type"] == "invalid_request_error"
        with pytest.raises(openai.BadRequestError) as err:
            await front.openai.chat.completions.create(
                model="chat", messages=USER, logprobs=True, top_logprobs=50
            )
        assert _conforms(err.value.response)["param"] == "top_logprobs"
        assert engine.forwarded == 0

        await front.openai.completions.create(model="chat", prompt="hi", logprobs=5)
        await front.openai.chat.completions.create(
            model="chat", messages=USER, logprobs=True, top_logprobs=20
        )
        assert engine.hits == {"/v1/completions": 1, "/v1/chat/completions": 1}


async def test_the_responses_api_and_batches_are_held_to_the_same_bounds(tmp_path):
    async with CountingEngine().running() as engine, gateway_before(tmp_path, engine) as front:
        with pytest.raises(openai.BadRequestError) as err:
            await front.openai.responses.create(model="chat", input="hi", top_logprobs=21)
        assert _conforms(err.value.response)["param"] == "top_logprobs"
        # A batch's line goes through the same edge (Gateway.internal).
        key = front.keys.lookup(front.secret)
        body = json.dumps({"model": "chat", "prompt": "x", "logprobs": 99}).encode()
        status, answer = await front.gateway.internal(key, "/v1/completions", body)
        assert status == 400 and json.loads(answer)["error"]["param"] == "logprobs"
        assert engine.forwarded == 0


async def test_anthropic_clients_get_the_bound_in_anthropics_error_shape(tmp_path):
    async with CountingEngine().running() as engine, gateway_before(tmp_path, engine) as front:
        with pytest.raises(anthropic.BadRequestError) as err:
            await front.anthropic.messages.create(
                model="chat", max_tokens=16, messages=USER, extra_body={"temperature": 1.5}
            )
        body = err.value.response.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert "temperature must be from 0 to 1" in body["error"]["message"]
        with pytest.raises(anthropic.BadRequestError):
            await front.anthropic.messages.count_tokens(
                model="chat",
                messages=USER,
                thinking={"type": "enabled", "budget_tokens": 100},
            )
        assert engine.forwarded == 0
