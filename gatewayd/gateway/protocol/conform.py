"""Engines' answers in the shape OpenAI's API description gives them.

Engines answer in OpenAI's shape, nearly: llama.cpp leaves out
``choices[].logprobs`` and ``message.refusal`` (both required, as null when
there is nothing), adds its ``timings``, and names the model by its file;
vLLM adds ``prompt_logprobs`` and ``kv_transfer_params``. Typed clients in
stricter languages refuse such answers, so every 200 body and stream chunk
is put right here: required fields present, ``model`` the name the client
asked for, engine-only fields dropped, values outside the description's
enums mapped to the nearest one it has.

Each function takes the parsed answer and the client's model name, changes
the answer in place and returns it. They run on every answer and chunk, so
they are plain dict operations: a chat answer takes a few microseconds.
(``../shared/reference/openai-openapi.yaml`` is the contract; the tests
validate against it.) The Responses adapter builds on ``chat_completion``
and ``chunk``.
"""

from __future__ import annotations

import json
import time
import uuid

# Fields engines add that OpenAI's answers do not have: llama.cpp's timings
# and debug output, vLLM's prompt logprobs and disaggregation parameters.
ENGINE_ONLY = ("timings", "__verbose", "prompt_logprobs", "prompt_token_ids", "kv_transfer_params")
# Per choice: vLLM's stop_reason (the stop string or token id that ended it).
CHOICE_ENGINE_ONLY = ("stop_reason", "token_ids")
CHAT_FINISH = frozenset(("stop", "length", "tool_calls", "content_filter", "function_call"))
COMPLETION_FINISH = frozenset(("stop", "length", "content_filter"))
# Fields of an answer's top level whose schema is a string or object, never null:
# engines write null for "not given", which the description does not allow.
_NOT_NULL = ("system_fingerprint", "metadata")
# The same in a chat message: tool_calls is an array, function_call an object.
_MESSAGE_NOT_NULL = ("tool_calls", "function_call", "annotations", "audio")
_USAGE_DETAILS = ("prompt_tokens_details", "completion_tokens_details")


def _head(body: dict, model: str, obj: str, prefix: str) -> None:
    for name in ENGINE_ONLY:
        body.pop(name, None)
    body["model"] = model
    body["object"] = obj
    if not isinstance(body.get("id"), str):
        body["id"] = f"{prefix}-{uuid.uuid4().hex}"
    created = body.get("created")
    if type(created) is not int:
        body["created"] = int(time.time())
    for name in _NOT_NULL:
        if name in body and body[name] is None:
            del body[name]
    usage = body.get("usage")
    if usage is not None:
        body["usage"] = _usage(usage)


def _usage(usage: object) -> dict:
    """OpenAI's usage object: the three counts as integers, details only where they are objects."""
    if not isinstance(usage, dict):
        usage = {}
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    if type(prompt) is not int:
        usage["prompt_tokens"] = prompt = 0
    if type(completion) is not int:
        usage["completion_tokens"] = completion = 0
    if type(usage.get("total_tokens")) is not int:
        usage["total_tokens"] = prompt + completion
    for name in _USAGE_DETAILS:
        if name in usage and not isinstance(usage[name], dict):
            del usage[name]
    return usage


def _choices(body: dict) -> list:
    choices = body.get("choices")
    if not isinstance(choices, list):
        choices = body["choices"] = []
    return choices


def _choice_common(choice: dict, i: int) -> None:
    for name in CHOICE_ENGINE_ONLY:
        choice.pop(name, None)
    if type(choice.get("index")) is not int:
        choice["index"] = i


def _chat_logprobs(choice: dict) -> None:
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        logprobs.setdefault("content", None)
        logprobs.setdefault("refusal", None)
    else:
        choice["logprobs"] = None


def chat_completion(body: dict, model: str) -> dict:
    """A whole chat answer (``chat.completion``) as OpenAI's description has it."""
    _head(body, model, "chat.completion", "chatcmpl")
    choices = _choices(body)
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            choice = choices[i] = {}
        _choice_common(choice, i)
        _chat_logprobs(choice)
        if choice.get("finish_reason") not in CHAT_FINISH:
            choice["finish_reason"] = "stop"
        message = choice.get("message")
        if not isinstance(message, dict):
            message = choice["message"] = {}
        message["role"] = "assistant"
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            message["content"] = str(content)
        else:
            message.setdefault("content", None)
        if not isinstance(message.get("refusal"), str):
            message["refusal"] = None
        for name in _MESSAGE_NOT_NULL:
            if name in message and message[name] is None:
                del message[name]
    return body


def chunk(body: dict, model: str) -> dict:
    """One chunk of a chat stream (``chat.completion.chunk``) as OpenAI's description has it."""
    # Engines asked for usage write "usage": null in every chunk but the last;
    # the description's usage is an object (its `nullable` is not JSON Schema).
    if "usage" in body and body["usage"] is None:
        del body["usage"]
    _head(body, model, "chat.completion.chunk", "chatcmpl")
    choices = _choices(body)
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            choice = choices[i] = {}
        _choice_common(choice, i)
        finish = choice.get("finish_reason")
        if finish is not None and finish not in CHAT_FINISH:
            choice["finish_reason"] = "stop"
        elif "finish_reason" not in choice:
            choice["finish_reason"] = None
        if "logprobs" in choice:
            _chat_logprobs(choice)
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            delta = choice["delta"] = {}
        elif delta:
            for name in _MESSAGE_NOT_NULL:
                if name in delta and delta[name] is None:
                    del delta[name]
            if "role" in delta and delta["role"] is None:
                del delta["role"]
    return body


def completion(body: dict, model: str) -> dict:
    """A whole text completion (``text_completion``)."""
    _head(body, model, "text_completion", "cmpl")
    choices = _choices(body)
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            choice = choices[i] = {}
        _choice_common(choice, i)
        if not isinstance(choice.get("text"), str):
            choice["text"] = ""
        if "logprobs" not in choice or not isinstance(choice["logprobs"], dict):
            choice["logprobs"] = None
        if choice.get("finish_reason") not in COMPLETION_FINISH:
            choice["finish_reason"] = "stop"
    return body


def completion_chunk(body: dict, model: str) -> dict:
    """One chunk of a completions stream: a completion whose finish_reason is null until the end.

    OpenAI's description has no schema of its own for these; the SDKs read
    them as completions.
    """
    if "usage" in body and body["usage"] is None:
        del body["usage"]
    _head(body, model, "text_completion", "cmpl")
    choices = _choices(body)
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            choice = choices[i] = {}
        _choice_common(choice, i)
        if not isinstance(choice.get("text"), str):
            choice["text"] = ""
        if not isinstance(choice.get("logprobs"), dict):
            choice["logprobs"] = None
        finish = choice.get("finish_reason")
        if finish is not None and finish not in COMPLETION_FINISH:
            choice["finish_reason"] = "stop"
        else:
            choice.setdefault("finish_reason", None)
    return body


def embeddings(body: dict, model: str) -> dict:
    """An embeddings answer (``list`` of ``embedding``), usage with its two counts."""
    for name in ENGINE_ONLY:
        body.pop(name, None)
    body["object"] = "list"
    body["model"] = model
    data = body.get("data")
    if not isinstance(data, list):
        data = body["data"] = []
    for i, item in enumerate(data):
        if isinstance(item, dict):
            item["object"] = "embedding"
            if type(item.get("index")) is not int:
                item["index"] = i
    usage = body.get("usage")
    if not isinstance(usage, dict):
        usage = body["usage"] = {}
    prompt = usage.get("prompt_tokens")
    if type(prompt) is not int:
        usage["prompt_tokens"] = prompt = 0
    if type(usage.get("total_tokens")) is not int:
        usage["total_tokens"] = prompt
    return body


# Path -> how its whole answers and its stream chunks are put right.
WHOLE = {
    "/v1/chat/completions": chat_completion,
    "/v1/completions": completion,
    "/v1/embeddings": embeddings,
}
CHUNK = {"/v1/chat/completions": chunk, "/v1/completions": completion_chunk}


def whole_bytes(path: str, answer: dict, data: bytes, model: str) -> bytes:
    """The engine's 200 body (``data``, parsed as ``answer``) conformed, as bytes to send.

    Embeddings are mostly floats, whose re-encoding costs far more than the
    rest of the gateway's work: when the model's name is all that changes,
    it is swapped in the engine's bytes instead.
    """
    fix = WHOLE.get(path)
    if fix is None:
        return data
    if path == "/v1/embeddings":
        swapped = _swap_embeddings_model(answer, data, model)
        if swapped is not None:
            return swapped
    return json.dumps(fix(answer, model)).encode()


def _swap_embeddings_model(answer: dict, data: bytes, model: str) -> bytes | None:
    served = answer.get("model")
    if not isinstance(served, str) or answer.get("object") != "list":
        return None
    if any(name in answer for name in ENGINE_ONLY):
        return None
    usage = answer.get("usage")
    if not (
        isinstance(usage, dict)
        and type(usage.get("prompt_tokens")) is int
        and type(usage.get("total_tokens")) is int
    ):
        return None
    items = answer.get("data")
    if not isinstance(items, list) or not all(
        isinstance(d, dict) and d.get("object") == "embedding" and type(d.get("index")) is int
        for d in items
    ):
        return None
    if served == model:
        return data
    new = b'"model":' + json.dumps(model).encode()
    for old in (
        b'"model":' + json.dumps(served).encode(),
        b'"model": ' + json.dumps(served).encode(),
    ):
        if data.count(old) == 1:
            return data.replace(old, new)
    return None
