"""The client API described as an OpenAPI 3.1 document, served at ``/v1/openapi.json``.

A plain dict, written by hand: the client API is OpenAI's and Anthropic's, so
the document says which of their fields the gateway reads and checks
(``gatewayd.gateway.validate``) and what it adds — its headers, its errors.
Fields not listed pass through to the engine (every request schema allows
extra properties). JSON Schema 2020-12, as OpenAPI 3.1 has it: a field that
may be ``null`` lists ``"null"`` among its types, and ``null`` counts as not sent.
"""

from __future__ import annotations

import json
from functools import cache

from gatewayd.gateway.router import PROFILES
from gatewayd.gateway.validate import MAX_COUNT, SEED_RANGE
from llmgw import __version__

# Every status the gateway answers with an error of its own.
ERROR_STATUSES = {
    "400": "The body is not JSON, or a field has the wrong type or value; `param` names it.",
    "401": "No API key, or one that is not valid, expired or revoked.",
    "403": "The key may not use this model.",
    "404": "No such model in the catalog, or no such route.",
    "413": "The body is over 32 MiB.",
    "429": "A rate limit or budget of the key, its project, team or organization is spent;"
    " `retry-after` says when to come back.",
    "503": "No replica of the model is ready, none answered, or its queue is full;"
    " `retry-after` says when to come back.",
    "504": "The request waited in the model's queue longer than its band may;"
    " `retry-after` says when to come back.",
}


@cache
def document_bytes() -> bytes:
    return json.dumps(document()).encode()


def document() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "llmgw client API",
            "version": __version__,
            "summary": "OpenAI- and Anthropic-compatible endpoints in front of your own engines.",
            "description": "The gateway checks what it must (key, model, limits and the"
            " fields below) and passes the rest to the engine. Errors of its own come in"
            " the listed shapes; an engine's own errors are passed on with its status, in"
            " the same shape. Every answer carries `x-llmgw-overhead-ms`.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "summary": "The catalog's models this key may use, and whether each is loaded",
                    "responses": {
                        "200": _json("The models", _ref("ModelList")),
                        **_errors(("401",)),
                    },
                }
            },
            "/v1/chat/completions": {
                "post": _openai_post(
                    "createChatCompletion",
                    "A chat completion, whole or streamed",
                    "ChatCompletionRequest",
                    "ChatCompletion",
                    stream_of="ChatCompletionChunk",
                )
            },
            "/v1/completions": {
                "post": _openai_post(
                    "createCompletion",
                    "A text completion, whole or streamed",
                    "CompletionRequest",
                    "Completion",
                    stream_of="Completion",
                )
            },
            "/v1/embeddings": {
                "post": _openai_post(
                    "createEmbeddings", "Embeddings of texts", "EmbeddingRequest", "EmbeddingList"
                )
            },
            "/v1/messages": {"post": _messages_post()},
            "/v1/openapi.json": {
                "get": {
                    "operationId": "getOpenApi",
                    "summary": "This document",
                    "security": [],
                    "responses": {"200": {"description": "This document", **_json_content({})}},
                }
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key from `llmgw ctl keys create`.",
                },
                "apiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-api-key",
                    "description": "The same key, where Anthropic's clients send it.",
                },
            },
            "parameters": {
                "profile": {
                    "name": "x-llmgw-profile",
                    "in": "header",
                    "description": "How a replica is chosen: chat (the default) keeps a"
                    " session on one replica and weighs time to first token, queue and KV"
                    " cache; batch takes the shortest queue; long-context the most free KV"
                    " cache.",
                    "schema": {"type": "string", "enum": list(PROFILES), "default": "chat"},
                },
                "session": {
                    "name": "x-llmgw-session",
                    "in": "header",
                    "description": "Requests of one session go to one replica, so its prompt"
                    " cache stays warm; `user` (or `metadata.user_id`) does when not sent.",
                    "schema": {"type": "string"},
                },
            },
            "headers": {
                "overhead": {
                    "description": "Milliseconds spent in the gateway, the engine's time"
                    " excluded; on every answer, errors included.",
                    "schema": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
                },
                "retryAfter": {
                    "description": "Whole seconds to wait before trying again.",
                    "schema": {"type": "string", "pattern": "^[0-9]+$"},
                },
            },
            "schemas": _schemas(),
        },
    }


# ---- building blocks --------------------------------------------------------


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(properties: dict, required: tuple[str, ...] = (), **more) -> dict:
    schema = {"type": "object", "properties": properties, **more}
    if required:
        schema["required"] = list(required)
    return schema


def _opt(*types: str, **more) -> dict:
    """An optional field: its types, or null."""
    return {"type": [*types, "null"], **more}


def _json_content(schema: dict) -> dict:
    return {"content": {"application/json": {"schema": schema}}}


def _json(description: str, schema: dict) -> dict:
    return {
        "description": description,
        "headers": {"x-llmgw-overhead-ms": {"$ref": "#/components/headers/overhead"}},
        **_json_content(schema),
    }


def _errors(statuses, schema: str = "Error") -> dict:
    out = {}
    for status in statuses:
        response = _json(ERROR_STATUSES[status], _ref(schema))
        if status in ("429", "503", "504"):
            response["headers"]["retry-after"] = {"$ref": "#/components/headers/retryAfter"}
        out[status] = response
    return out


_PARAMETERS = [
    {"$ref": "#/components/parameters/profile"},
    {"$ref": "#/components/parameters/session"},
]


def _openai_post(
    operation_id: str, summary: str, request: str, answer: str, stream_of: str = ""
) -> dict:
    ok = _json("The engine's answer", _ref(answer))
    if stream_of:
        ok["description"] += "; with `stream: true`, server-sent events"
        ok["content"]["text/event-stream"] = {
            "schema": {
                "type": "string",
                "description": f"`data: <{stream_of}>` events, then `data: [DONE]`.",
            }
        }
    return {
        "operationId": operation_id,
        "summary": summary,
        "parameters": _PARAMETERS,
        "requestBody": {"required": True, **_json_content(_ref(request))},
        "responses": {"200": ok, **_errors(ERROR_STATUSES)},
    }


def _messages_post() -> dict:
    ok = _json("The answer as an Anthropic message", _ref("Message"))
    ok["description"] += "; with `stream: true`, Anthropic's server-sent events"
    ok["content"]["text/event-stream"] = {
        "schema": {
            "type": "string",
            "description": "message_start, content_block_start/delta/stop, message_delta,"
            " message_stop events, as Anthropic sends them.",
        }
    }
    return {
        "operationId": "createMessage",
        "summary": "Anthropic's Messages API, served by the same engines",
        "security": [{"apiKey": []}, {"bearer": []}],
        "parameters": _PARAMETERS,
        "requestBody": {"required": True, **_json_content(_ref("MessagesRequest"))},
        "responses": {"200": ok, **_errors(ERROR_STATUSES, "AnthropicError")},
    }


# ---- schemas ------------------------------------------------------------------


def _schemas() -> dict:
    string, integer, number = {"type": "string"}, {"type": "integer"}, {"type": "number"}
    positive = _opt("integer", minimum=1, maximum=MAX_COUNT)
    prompt = {
        "description": "A string, or a list of strings, token ids or lists of token ids.",
        "oneOf": [
            string,
            {
                "type": "array",
                "minItems": 1,
                "items": {"oneOf": [string, integer, {"type": "array", "items": integer}]},
            },
        ],
    }
    parts = {"type": "array", "items": _ref("ContentPart")}
    usage = _obj(
        {"prompt_tokens": integer, "completion_tokens": integer, "total_tokens": integer},
        ("prompt_tokens", "total_tokens"),
    )
    sampling = {
        "max_tokens": positive,
        "temperature": _opt("number", minimum=0, maximum=2),
        "top_p": _opt("number", minimum=0, maximum=1),
        "n": positive,
        "stop": {
            "oneOf": [string, {"type": "array", "items": string}, {"type": "null"}],
        },
        "stream": _opt("boolean"),
        "stream_options": _opt(
            "object", properties={"include_usage": _opt("boolean")}, additionalProperties=True
        ),
        "frequency_penalty": _opt("number", minimum=-2, maximum=2),
        "presence_penalty": _opt("number", minimum=-2, maximum=2),
        "seed": _opt("integer", minimum=SEED_RANGE[0], maximum=SEED_RANGE[1]),
        "user": _opt(
            "string", description="Who asks; the session, when x-llmgw-session is not sent."
        ),
    }
    return {
        "Error": _obj(
            {
                "error": _obj(
                    {
                        "message": string,
                        "type": string,
                        "param": _opt("string", description="The field at fault."),
                        "code": _opt(
                            "string",
                            "integer",
                            description="invalid_json, invalid_type, invalid_value,"
                            " missing_field, model_not_found, rate_limited …; an engine's"
                            " own errors may carry its number.",
                        ),
                    },
                    ("message", "type"),
                )
            },
            ("error",),
        ),
        "AnthropicError": _obj(
            {
                "type": {"const": "error"},
                "error": _obj({"type": string, "message": string}, ("type", "message")),
            },
            ("type", "error"),
        ),
        "ModelList": _obj(
            {
                "object": {"const": "list"},
                "data": {
                    "type": "array",
                    "items": _obj(
                        {
                            "id": string,
                            "object": {"const": "model"},
                            "created": integer,
                            "owned_by": string,
                            "loaded": {
                                "type": "boolean",
                                "description": "Whether a replica is ready now.",
                            },
                        },
                        ("id", "object"),
                    ),
                },
            },
            ("object", "data"),
        ),
        "ContentPart": {
            "oneOf": [
                _obj({"type": {"const": "text"}, "text": string}, ("type", "text")),
                _obj(
                    {
                        "type": {
                            "type": "string",
                            "not": {"const": "text"},
                            "examples": ["image_url", "input_audio"],
                        },
                        "text": string,
                        "image_url": _obj({"url": string}, ("url",)),
                    },
                    ("type",),
                ),
            ]
        },
        "ChatMessage": {
            "description": "Content is required but for an assistant turn that calls tools.",
            "oneOf": [
                _obj(
                    {
                        "role": {
                            "type": "string",
                            "minLength": 1,
                            "not": {"const": "assistant"},
                            "examples": ["system", "developer", "user", "tool"],
                        },
                        "content": {"oneOf": [string, parts]},
                        "name": string,
                        "tool_call_id": string,
                    },
                    ("role", "content"),
                ),
                _obj(
                    {
                        "role": {"const": "assistant"},
                        "content": {"oneOf": [string, parts, {"type": "null"}]},
                        "name": string,
                        "tool_calls": {"type": "array", "items": {"type": "object"}},
                    },
                    ("role",),
                ),
            ],
        },
        "Tool": _obj(
            {
                "type": {"const": "function"},
                "function": _obj(
                    {"name": string, "description": string, "parameters": {"type": "object"}},
                    ("name",),
                ),
            },
            ("type", "function"),
        ),
        "ChatCompletionRequest": _obj(
            {
                "model": {"type": "string", "minLength": 1},
                "messages": {"type": "array", "minItems": 1, "items": _ref("ChatMessage")},
                "max_completion_tokens": positive,
                **sampling,
                "tools": _opt("array", items=_ref("Tool")),
                "tool_choice": {
                    "oneOf": [
                        {"enum": ["none", "auto", "required"]},
                        _obj(
                            {"type": {"const": "function"}, "function": _obj({"name": string})},
                            ("type", "function"),
                        ),
                        {"type": "null"},
                    ]
                },
                "response_format": _opt(
                    "object",
                    properties={"type": {"enum": ["text", "json_object", "json_schema"]}},
                ),
            },
            ("model", "messages"),
            additionalProperties=True,
        ),
        "CompletionRequest": _obj(
            {"model": {"type": "string", "minLength": 1}, "prompt": prompt, **sampling},
            ("model", "prompt"),
            additionalProperties=True,
        ),
        "EmbeddingRequest": _obj(
            {
                "model": {"type": "string", "minLength": 1},
                "input": prompt,
                "dimensions": positive,
                "encoding_format": _opt("string", enum=["float", "base64", None]),
                "user": _opt("string"),
            },
            ("model", "input"),
            additionalProperties=True,
        ),
        "ChatCompletion": _obj(
            {
                "id": string,
                "object": {"const": "chat.completion"},
                "created": integer,
                "model": string,
                "choices": {
                    "type": "array",
                    "items": _obj(
                        {
                            "index": integer,
                            "message": _obj(
                                {
                                    "role": {"const": "assistant"},
                                    "content": _opt("string"),
                                    "reasoning_content": _opt("string"),
                                    "tool_calls": {"type": "array", "items": {"type": "object"}},
                                },
                                ("role",),
                            ),
                            "finish_reason": _opt("string"),
                        },
                        ("index", "message"),
                    ),
                },
                "usage": usage,
            },
            ("id", "object", "choices"),
        ),
        "ChatCompletionChunk": _obj(
            {
                "id": string,
                "object": {"const": "chat.completion.chunk"},
                "choices": {
                    "type": "array",
                    "items": _obj(
                        {
                            "index": integer,
                            "delta": {"type": "object"},
                            "finish_reason": _opt("string"),
                        }
                    ),
                },
                "usage": {"oneOf": [usage, {"type": "null"}]},
            },
            ("id", "choices"),
        ),
        "Completion": _obj(
            {
                "id": string,
                "object": {"const": "text_completion"},
                "created": integer,
                "model": string,
                "choices": {
                    "type": "array",
                    "items": _obj(
                        {"index": integer, "text": string, "finish_reason": _opt("string")},
                        ("index", "text"),
                    ),
                },
                "usage": usage,
            },
            ("id", "choices"),
        ),
        "EmbeddingList": _obj(
            {
                "object": {"const": "list"},
                "data": {
                    "type": "array",
                    "items": _obj(
                        {
                            "object": {"const": "embedding"},
                            "index": integer,
                            "embedding": {
                                "description": "Floats, or base64 of little-endian float32s.",
                                "oneOf": [{"type": "array", "items": number}, string],
                            },
                        },
                        ("index", "embedding"),
                    ),
                },
                "model": string,
                "usage": usage,
            },
            ("object", "data"),
        ),
        **_anthropic_schemas(string, integer),
    }


def _anthropic_schemas(string: dict, integer: dict) -> dict:
    text_block = _obj({"type": {"const": "text"}, "text": string}, ("type", "text"))
    return {
        "ContentBlock": _obj(
            {
                "type": {
                    "enum": [
                        "text",
                        "image",
                        "document",
                        "tool_use",
                        "tool_result",
                        "thinking",
                        "redacted_thinking",
                    ]
                },
                "text": string,
                "source": _obj(
                    {
                        "type": {"enum": ["base64", "url", "text"]},
                        "media_type": string,
                        "data": string,
                        "url": string,
                    },
                    ("type",),
                ),
                "id": string,
                "name": string,
                "input": {"type": "object"},
                "tool_use_id": string,
                "content": {"oneOf": [string, {"type": "array", "items": {"type": "object"}}]},
                "thinking": string,
                "signature": string,
            },
            ("type",),
            description="text, image and document blocks in user turns, tool_use in"
            " assistant turns, tool_result answering one; thinking blocks sent back are"
            " dropped. Server tools and PDF sources cannot be served.",
        ),
        "MessagesRequest": _obj(
            {
                "model": {"type": "string", "minLength": 1},
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {
                            "role": {"enum": ["user", "assistant"]},
                            "content": {
                                "oneOf": [
                                    string,
                                    {
                                        "type": "array",
                                        "minItems": 1,
                                        "items": _ref("ContentBlock"),
                                    },
                                ]
                            },
                        },
                        ("role", "content"),
                    ),
                },
                "system": {
                    "oneOf": [string, {"type": "array", "items": text_block}, {"type": "null"}]
                },
                "stream": _opt("boolean"),
                "temperature": _opt("number", minimum=0, maximum=1),
                "top_p": _opt("number", minimum=0, maximum=1),
                "top_k": _opt("integer", minimum=1),
                "stop_sequences": _opt("array", items=string),
                "tools": _opt(
                    "array",
                    items=_obj(
                        {"name": string, "description": string, "input_schema": {"type": "object"}},
                        ("name", "input_schema"),
                    ),
                ),
                "tool_choice": _opt(
                    "object",
                    properties={
                        "type": {"enum": ["auto", "any", "tool", "none"]},
                        "name": string,
                        "disable_parallel_tool_use": {"type": "boolean"},
                    },
                    required=["type"],
                ),
                "thinking": _opt(
                    "object",
                    properties={
                        "type": {"enum": ["enabled", "adaptive", "disabled"]},
                        "budget_tokens": _opt("integer", minimum=1),
                    },
                    required=["type"],
                ),
                "metadata": _opt("object", properties={"user_id": _opt("string")}),
            },
            ("model", "max_tokens", "messages"),
            additionalProperties=True,
        ),
        "Message": _obj(
            {
                "id": string,
                "type": {"const": "message"},
                "role": {"const": "assistant"},
                "model": string,
                "content": {"type": "array", "items": _ref("ContentBlock")},
                "stop_reason": {
                    "enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]
                },
                "stop_sequence": _opt("string"),
                "usage": _obj(
                    {
                        "input_tokens": integer,
                        "output_tokens": integer,
                        "cache_read_input_tokens": integer,
                    },
                    ("input_tokens", "output_tokens"),
                ),
            },
            ("id", "type", "role", "content", "stop_reason", "usage"),
        ),
    }
