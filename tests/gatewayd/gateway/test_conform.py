"""Engines' answers put in OpenAI's shape: checked against OpenAI's own API description."""

from __future__ import annotations

import functools
import json

import jsonschema_rs
import pytest

from gatewayd.gateway.protocol import conform
from gatewayd.gateway.protocol.conform_stream import StreamConformer
from gatewayd.gateway.protocol.errors import engine_error
from gatewayd.gateway.protocol.sse import UsageTap
from gatewayd.gateway.routing.forward import Outcome
from tests.gatewayd.gateway import openapi_check


@functools.cache
def _validator(schema: str):
    # The description still writes OpenAPI 3.0's `nullable: true` in places
    # (a chunk's finish_reason); as JSON Schema that is a null allowed beside the type.
    def allow_null(node):
        if isinstance(node, dict):
            node = {k: allow_null(v) for k, v in node.items()}
            if node.pop("nullable", False):
                return {"anyOf": [node, {"type": "null"}]}
            return node
        if isinstance(node, list):
            return [allow_null(v) for v in node]
        return node

    components = allow_null(openapi_check._components())
    root = {"$ref": f"#/components/schemas/{schema}", "components": components}
    return jsonschema_rs.Draft202012Validator(root, validate_formats=False)


def schema_errors(value: dict, schema: str) -> list[str]:
    return [f"{e.instance_path}: {e.message}" for e in _validator(schema).iter_errors(value)]


SERVED = "/var/lib/llmgw/models/gemma-3-270m-q4_k_m.gguf"
TIMINGS = {"cache_n": 0, "prompt_n": 25, "prompt_ms": 95.2, "predicted_n": 4}


def llama_chat() -> dict:
    # What llama.cpp's server answered (recorded): no logprobs, no refusal, its timings.
    return {
        "choices": [
            {
                "finish_reason": "length",
                "index": 0,
                "message": {"role": "assistant", "content": "hi<|im"},
            }
        ],
        "created": 1796170143,
        "model": SERVED,
        "system_fingerprint": "b0-unknown",
        "object": "chat.completion",
        "usage": {
            "completion_tokens": 4,
            "prompt_tokens": 25,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        "id": "chatcmpl-J8TiuQBdVVC18x9STRdbZUVDxLthGD9h",
        "timings": TIMINGS,
    }


def test_llama_cpps_chat_answer_validates_under_the_clients_model_name_without_its_timings():
    assert schema_errors(llama_chat(), "CreateChatCompletionResponse")  # as the engine wrote it
    fixed = conform.chat_completion(llama_chat(), "gemma-3-270m")
    assert schema_errors(fixed, "CreateChatCompletionResponse") == []
    assert fixed["model"] == "gemma-3-270m" and "timings" not in fixed
    choice = fixed["choices"][0]
    assert choice["logprobs"] is None and choice["message"]["refusal"] is None
    assert choice["message"]["content"] == "hi<|im" and fixed["usage"]["total_tokens"] == 29


def test_vllms_extra_fields_and_nulls_are_dropped_and_unknown_finish_reasons_mapped():
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "Qwen/Qwen3-8B",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "x",
                    "reasoning_content": "because",
                    "tool_calls": [],
                    "function_call": None,
                },
                "logprobs": None,
                "finish_reason": "abort",
                "stop_reason": None,
            }
        ],
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "total_tokens": 2,
            "prompt_tokens_details": None,
        },
        "prompt_logprobs": None,
        "kv_transfer_params": None,
        "system_fingerprint": None,
    }
    fixed = conform.chat_completion(answer, "qwen")
    assert schema_errors(fixed, "CreateChatCompletionResponse") == []
    choice = fixed["choices"][0]
    assert choice["finish_reason"] == "stop" and "stop_reason" not in choice
    # Reasoning is kept: the Anthropic and Responses adapters hand it on.
    assert choice["message"]["reasoning_content"] == "because"
    assert "prompt_logprobs" not in fixed and "system_fingerprint" not in fixed


def test_an_answer_missing_everything_still_validates():
    fixed = conform.chat_completion({"choices": [{"message": {}}]}, "m")
    assert schema_errors(fixed, "CreateChatCompletionResponse") == []
    assert fixed["id"].startswith("chatcmpl-") and isinstance(fixed["created"], int)


def test_completions_and_embeddings_validate_under_the_clients_model_name():
    text = {
        "choices": [{"text": " I am", "index": 0, "finish_reason": "length"}],
        "created": 1,
        "model": SERVED,
        "object": "text_completion",
        "usage": {"completion_tokens": 3, "prompt_tokens": 2, "total_tokens": 5},
        "id": "chatcmpl-x",
        "timings": TIMINGS,
    }
    fixed = conform.completion(text, "m")
    assert schema_errors(fixed, "CreateCompletionResponse") == []
    assert fixed["choices"][0]["logprobs"] is None and fixed["model"] == "m"
    emb = {
        "model": SERVED,
        "object": "list",
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
        "data": [{"embedding": [0.5, -0.25], "index": 0, "object": "embedding"}],
    }
    data = json.dumps(emb, separators=(",", ":")).encode()
    sent = conform.whole_bytes("/v1/embeddings", emb, data, "m")
    out = json.loads(sent)
    assert schema_errors(out, "CreateEmbeddingResponse") == []
    # Only the name changed: the engine's floats are sent as they came, not written again.
    assert out["model"] == "m" and sent == data.replace(json.dumps(SERVED).encode(), b'"m"')


def test_an_embeddings_answer_that_needs_more_than_its_name_is_written_again():
    emb = {"model": "x", "data": [{"embedding": [1.0]}], "usage": {"prompt_tokens": 1}}
    out = json.loads(conform.whole_bytes("/v1/embeddings", emb, json.dumps(emb).encode(), "m"))
    assert schema_errors(out, "CreateEmbeddingResponse") == []
    assert out["usage"]["total_tokens"] == 1 and out["data"][0]["index"] == 0


def sse(*chunks) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def llama_stream() -> bytes:
    head = {"created": 1, "id": "chatcmpl-n", "model": SERVED, "object": "chat.completion.chunk"}
    return sse(
        {
            **head,
            "choices": [
                {"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}
            ],
        },
        {**head, "choices": [{"finish_reason": None, "index": 0, "delta": {"content": "<"}}]},
        {**head, "choices": [{"finish_reason": "length", "index": 0, "delta": {}}]},
        {
            **head,
            "choices": [],
            "usage": {"completion_tokens": 1, "prompt_tokens": 25, "total_tokens": 26},
            "timings": TIMINGS,
        },
    )


@pytest.mark.parametrize("drop_usage", [True, False])
def test_every_chunk_of_a_llama_cpp_stream_validates_fed_in_any_pieces(drop_usage):
    raw = llama_stream()
    for size in (1, 7, len(raw)):
        outcome = Outcome()
        tap = UsageTap(outcome, drop_usage=drop_usage, sent_at=0.0, fix=conform.chunk, model="m")
        out = b"".join(tap.feed(raw[i : i + size]) for i in range(0, len(raw), size))
        out += tap.flush()
        frames = [f for f in out.split(b"\n\n") if f]
        assert frames[-1] == b"data: [DONE]"
        chunks = [json.loads(f.removeprefix(b"data: ")) for f in frames[:-1]]
        assert len(chunks) == (3 if drop_usage else 4)
        for chunk in chunks:
            assert schema_errors(chunk, "CreateChatCompletionStreamResponse") == []
            assert chunk["model"] == "m" and "timings" not in chunk
        assert outcome.completion_tokens == 1 and outcome.prompt_tokens == 25


def test_an_engines_error_mid_stream_is_relayed_in_openais_error_shape():
    tap = UsageTap(Outcome(), drop_usage=False, sent_at=0.0, fix=conform.chunk, model="m")
    out = tap.feed(b'data: {"error": {"code": 500, "message": "boom", "type": "server_error"}}\n\n')
    error = json.loads(out.removeprefix(b"data: "))["error"]
    assert error == {
        "message": "boom",
        "type": "server_error",
        "param": None,
        "code": "upstream_error",
    }
    assert schema_errors({"error": error}, "ErrorResponse") == []


@pytest.mark.parametrize(
    ("status", "body", "want_status", "want_code"),
    [
        # llama.cpp's refusal, its code a number: a 400 with its words and a string code.
        (
            400,
            (
                b'{"error":{"code":400,"message":"Prompt contains invalid tokens",'
                b'"type":"invalid_request_error"}}'
            ),
            400,
            None,
        ),
        # vLLM's older shape.
        (
            400,
            b'{"object":"error","message":"too long","type":"BadRequestError","code":400}',
            400,
            None,
        ),
        # llama.cpp answers 500 to some requests it cannot read: still the client's fault.
        (
            500,
            (
                b'{"error":{"code":500,"message":"Failed to parse tools: Unsupported tool type",'
                b'"type":"server_error"}}'
            ),
            400,
            None,
        ),
        (
            500,
            b'{"error":{"code":500,"message":"out of memory","type":"server_error"}}',
            502,
            "upstream_error",
        ),
        # The engine refusing our engine key is the gateway's fault, not the client's.
        (401, b'{"error":{"message":"Invalid API Key"}}', 502, "upstream_error"),
        (503, b"Loading model", 502, "upstream_error"),
        (429, b'{"error":{"message":"busy"}}', 429, "rate_limited"),
    ],
)
def test_an_engines_error_becomes_the_gateways_in_openais_shape(
    status, body, want_status, want_code
):
    err = engine_error(status, body, model="m", retry_after_s=3)
    assert err.status == want_status and err.code == want_code
    sent = json.loads(err.body())
    assert schema_errors(sent, "ErrorResponse") == []
    words = json.loads(body)["error"]["message"] if body.startswith(b'{"error"') else None
    assert words is None or words in err.message


def token_frame(text: str, *, model: str = SERVED, usage_null: bool = False) -> bytes:
    chunk = {
        "choices": [{"finish_reason": None, "index": 0, "delta": {"content": text}}],
        "created": 1,
        "id": "chatcmpl-n",
        "model": model,
        "object": "chat.completion.chunk",
    }
    if usage_null:
        chunk["usage"] = None
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode()


@pytest.mark.parametrize("usage_null", [False, True])
def test_once_a_token_chunk_needed_only_its_name_the_next_are_fixed_in_their_bytes(usage_null):
    # Parsing every chunk of every stream cost half again the gateway's CPU per stream.
    conformer = StreamConformer(conform.chunk, "m")
    first = token_frame("a", usage_null=usage_null)
    assert conformer.fast(first) is None  # nothing learnt yet
    conformer.slow(first, json.loads(first.removeprefix(b"data: ")))
    fast = conformer.fast(token_frame('b "quoted"', usage_null=usage_null))
    assert fast is not None
    chunk = json.loads(fast.removeprefix(b"data: "))
    assert chunk == conform.chunk(
        json.loads(token_frame('b "quoted"').removeprefix(b"data: ")), "m"
    )
    assert schema_errors(chunk, "CreateChatCompletionStreamResponse") == []


def test_chunks_unlike_the_learnt_ones_are_parsed():
    conformer = StreamConformer(conform.chunk, "m")
    first = token_frame("a")
    conformer.slow(first, json.loads(first.removeprefix(b"data: ")))
    finish = first.replace(b'"finish_reason":null', b'"finish_reason":"length"')
    assert conformer.fast(finish) is None
    assert conformer.fast(token_frame("a", model="other")) is None
    assert conformer.fast(first.replace(b'"content"', b'"tool_calls":[],"content"')) is None
    assert conformer.fast(first[:-1] + b',"usage":{"prompt_tokens":1}}') is None


def test_an_engine_whose_chunks_need_more_than_the_name_is_parsed_throughout():
    conformer = StreamConformer(conform.chunk, "m")
    # No finish_reason at all: conforming adds it, so no chunk may skip the parse.
    frame = token_frame("a").replace(b'"finish_reason":null,', b"")
    for _ in range(6):
        out = conformer.slow(frame, json.loads(frame.removeprefix(b"data: ")))
        assert json.loads(out.removeprefix(b"data: "))["choices"][0]["finish_reason"] is None
        assert conformer.fast(frame) is None
