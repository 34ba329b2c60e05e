"""The schemas of the OpenAPI document's components (``gatewayd.gateway.protocol.openapi``)."""

from __future__ import annotations

from gatewayd.gateway.protocol.validate import (
    MAX_COUNT,
    MAX_INPUTS,
    MAX_N,
    MAX_TOKEN_ID,
    SEED_RANGE,
)


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


def _schemas() -> dict:
    string, integer, number = {"type": "string"}, {"type": "integer"}, {"type": "number"}
    positive = _opt("integer", minimum=1, maximum=MAX_COUNT)
    token_ids = {
        "type": "array",
        "minItems": 1,
        "items": {"type": "integer", "minimum": 0, "maximum": MAX_TOKEN_ID},
    }
    prompt = {
        "description": "A string, or a list of strings, of token ids or of lists of token ids"
        " (ids in the model's vocabulary).",
        "oneOf": [
            string,
            {"type": "array", "minItems": 1, "items": string},
            token_ids,
            {"type": "array", "minItems": 1, "items": token_ids},
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
        "n": _opt("integer", minimum=1, maximum=MAX_N),
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
        "Model": _obj(
            {
                "id": string,
                "object": {"const": "model"},
                "created": integer,
                "owned_by": string,
                "loaded": {"type": "boolean", "description": "Whether a replica is ready now."},
            },
            ("id", "object", "created", "owned_by"),
        ),
        "ModelList": _obj(
            {"object": {"const": "list"}, "data": {"type": "array", "items": _ref("Model")}},
            ("object", "data"),
        ),
        "MessageTokensCount": _obj(
            {
                "input_tokens": {
                    "type": "integer",
                    "description": "The prompt's tokens by the engine's own template and"
                    " tokenizer: what the answer's usage would report.",
                }
            },
            ("input_tokens",),
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
                        "tool_calls": {"type": "array", "items": _ref("ToolCall")},
                    },
                    ("role",),
                ),
            ],
        },
        "ToolCall": _obj(
            {
                "id": string,
                "type": {"const": "function"},
                "function": _obj({"name": string, "arguments": string}, ("name",)),
            },
            ("function",),
        ),
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
                "input": {
                    **prompt,
                    "oneOf": [
                        string,
                        {**prompt["oneOf"][1], "maxItems": MAX_INPUTS},
                        token_ids,
                        {**prompt["oneOf"][3], "maxItems": MAX_INPUTS},
                    ],
                },
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
