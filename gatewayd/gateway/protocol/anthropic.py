"""Anthropic's Messages API served by engines that speak only OpenAI's chat completions.

Pure conversion, no I/O, in three modules: ``anthropic_request.messages_to_chat``
turns a ``/v1/messages`` body into a chat completions body; here,
``chat_to_message`` turns the engine's answer into an Anthropic message and
``error_body`` shapes an error as Anthropic's clients expect;
``anthropic_stream.StreamConverter`` does for streams what ``chat_to_message``
does for whole answers.

Where the two APIs do not meet one to one:

- ``finish_reason`` → ``stop_reason``: length → max_tokens; content_filter →
  refusal (the answer was withheld for what it said, which is what refusal tells
  an Anthropic client); tool calls in the answer → tool_use whatever the engine
  said (vLLM answers a named ``tool_choice`` with ``stop``); a stop string the
  engine names (vLLM's ``stop_reason``) → stop_sequence; anything else → end_turn.
- Usage: Anthropic's ``input_tokens`` leaves out tokens read from the cache, which
  OpenAI's ``prompt_tokens`` includes, so cached tokens are subtracted.
- The engine's ``reasoning_content`` comes back as a ``thinking`` block before
  the text, when the client asked for thinking.
"""

from __future__ import annotations

import hashlib
import json
import uuid

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    # Anthropic's own status for overloaded_error.
    529: "overloaded_error",
}


def error_body(status: int, message: str) -> dict:
    """An error in Anthropic's shape, its type chosen by the HTTP status."""
    kind = _ERROR_TYPES.get(status) or (
        "invalid_request_error" if 400 <= status < 500 else "api_error"
    )
    return {"type": "error", "error": {"type": kind, "message": message}}


def chat_to_message(resp: dict, *, model: str, include_thinking: bool = True) -> dict:
    """The Anthropic message for an engine's non-streamed chat completion.

    ``model`` is the name the client asked for; ``include_thinking`` is false
    when the client did not ask for thinking (``anthropic_request.wants_thinking``).
    """
    choices = resp.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict] = []
    reasoning = reasoning_text(message)
    if reasoning and include_thinking:
        content.append(
            {"type": "thinking", "thinking": reasoning, "signature": thinking_signature(reasoning)}
        )
    text = message.get("content")
    if isinstance(text, list):  # a few engines answer in parts
        text = "".join(part.get("text") or "" for part in text if isinstance(part, dict))
    if text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or tool_use_id(),
                "name": function.get("name") or "",
                "input": tool_input(function.get("arguments")),
            }
        )
    reason, sequence = stop_reason(
        choice.get("finish_reason"),
        choice.get("stop_reason"),
        has_tool_calls=any(block["type"] == "tool_use" for block in content),
    )
    return {
        "id": message_id(resp.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(resp.get("usage")),
    }


def stop_reason(
    finish_reason: str | None, matched_stop: object, *, has_tool_calls: bool
) -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for an OpenAI finish_reason.

    ``matched_stop`` is vLLM's ``stop_reason``: the stop string met, a stop
    token's id, or None.
    """
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason == "content_filter":
        return "refusal", None
    if has_tool_calls:
        return "tool_use", None
    if isinstance(matched_stop, str):
        return "stop_sequence", matched_stop
    return "end_turn", None


def usage(openai_usage: dict | None) -> dict:
    """Anthropic's usage for OpenAI's; cache reads are not input_tokens there."""
    openai_usage = openai_usage or {}
    prompt = openai_usage.get("prompt_tokens") or 0
    cached = (openai_usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    out = {
        "input_tokens": max(prompt - (cached or 0), 0),
        "output_tokens": openai_usage.get("completion_tokens") or 0,
    }
    if cached is not None:
        out["cache_read_input_tokens"] = cached
    return out


def reasoning_text(message_or_delta: dict) -> str | None:
    # llama.cpp and older vLLM say reasoning_content; vLLM 0.10+ says reasoning.
    return message_or_delta.get("reasoning_content") or message_or_delta.get("reasoning")


def tool_input(arguments: object) -> dict:
    """A tool call's arguments as the object tool_use.input must be.

    Arguments that are not a JSON object are kept whole under ``_raw``, so the
    client can still see what the model wrote.
    """
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def thinking_signature(thinking: str) -> str:
    # Clients must get a signature and send it back unread; nothing here can sign
    # as Anthropic does, and thinking sent back is dropped, so a digest will do.
    return hashlib.sha256(thinking.encode()).hexdigest()


def message_id(engine_id: object = None) -> str:
    # The engine's own id, when it gave one, so a message can be found in its log.
    if isinstance(engine_id, str) and engine_id:
        return "msg_" + engine_id.removeprefix("chatcmpl-")
    return "msg_" + uuid.uuid4().hex


def tool_use_id() -> str:
    return "toolu_" + uuid.uuid4().hex
