"""The client API described as an OpenAPI 3.1 document, served at ``/v1/openapi.json``.

A plain dict, written by hand: the client API is OpenAI's and Anthropic's, so
the document says which of their fields the gateway reads and checks
(``gatewayd.gateway.protocol.validate``) and what it adds — its headers, its errors.
Fields not listed pass through to the engine (every request schema allows
extra properties). JSON Schema 2020-12, as OpenAPI 3.1 has it: a field that
may be ``null`` lists ``"null"`` among its types, and ``null`` counts as not sent.
"""

from __future__ import annotations

import json
from functools import cache

from gatewayd.gateway.protocol import openapi_stateful
from gatewayd.gateway.protocol.openapi_schemas import _ref, _schemas
from gatewayd.gateway.routing.router import PROFILES
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
    "502": "The engine failed (it answered 5xx, broke off, or could not be reached) on"
    " every replica tried; `code` is upstream_error. A 5xx never means the request was"
    " at fault: an engine refusing it is a 400 in the engine's words.",
    "503": "No replica of the model is ready, or its queue is full;"
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
            " fields below) and passes the rest to the engine. Answers come in OpenAI's"
            " shape whatever the engine wrote (required fields present, `model` the name"
            " asked for). Errors come in the listed shapes: an engine refusing a request is"
            " a 400 in the engine's words, an engine failing a 502. `n` > 1 is served for"
            " every engine (fanned out where the engine answers one choice at a time)."
            " Every answer carries `x-llmgw-overhead-ms`.",
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
            "/v1/models/{model}": {
                "get": {
                    "operationId": "retrieveModel",
                    "summary": "One model of the catalog, if this key may use it",
                    "parameters": [
                        {
                            "name": "model",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": {
                        "200": _json("The model", _ref("Model")),
                        **_errors(("401", "404")),
                    },
                }
            },
            "/v1/messages": {"post": _messages_post()},
            "/v1/messages/count_tokens": {
                "post": {
                    "operationId": "countMessageTokens",
                    "summary": "The tokens of a Messages request's prompt, by the engine's"
                    " tokenizer (nothing generated, nothing metered)",
                    "security": [{"apiKey": []}, {"bearer": []}],
                    "requestBody": {"required": True, **_json_content(_ref("MessagesRequest"))},
                    "responses": {
                        "200": _json("The count", _ref("MessageTokensCount")),
                        **_errors(("400", "401", "403", "404", "502", "503"), "AnthropicError"),
                    },
                }
            },
            **openapi_stateful.paths(_json, _errors, _PARAMETERS),
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
            "schemas": {**_schemas(), **openapi_stateful.schemas()},
        },
    }


# ---- building blocks --------------------------------------------------------


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
