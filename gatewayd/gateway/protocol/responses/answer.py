"""Response objects: a chat completion's answer in the Responses API's shape.

``Envelope`` holds what every Response object of one request repeats — its
id, the request's settings echoed back (``model`` as the client named it,
``tools``, ``tool_choice``, ``text`` …) — and ``envelope.response(...)`` makes
the object for a status and output. ``output_items`` turns a chat answer's
message into output items, in the order a model produces them: reasoning,
then the message, then function calls.
"""

from __future__ import annotations

import secrets
import time


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def reasoning_text(message: dict) -> str:
    """An engine's reasoning: vLLM/SGLang/llama.cpp write ``reasoning_content``, some ``reasoning``."""
    text = message.get("reasoning_content") or message.get("reasoning")
    return text if isinstance(text, str) else ""


def usage(chat_usage: dict | None) -> dict:
    """Chat's usage object as the Responses API's."""
    u = chat_usage if isinstance(chat_usage, dict) else {}
    prompt = int(u.get("prompt_tokens") or 0)
    completion = int(u.get("completion_tokens") or 0)
    cached = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = int((u.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def status_of(finish_reason: str | None) -> tuple[str, dict | None]:
    """(status, incomplete_details) for chat's finish_reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str = "completed") -> dict:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [] if text is None else [text_part(text)],
    }


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def output_items(message: dict, status: str = "completed") -> list[dict]:
    """A chat answer's message as output items."""
    items = []
    if thought := reasoning_text(message):
        items.append(reasoning_item(new_id("rs"), thought, status))
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if content or not calls:
        items.append(message_item(new_id("msg"), content or "", status))
    for call in calls:
        function = call.get("function") or {}
        items.append(
            function_call_item(
                new_id("fc"),
                call.get("id") or new_id("call"),
                function.get("name") or "",
                function.get("arguments") or "",
                status,
            )
        )
    return items


def _tool_echo(tool: dict) -> dict:
    # The schema's FunctionTool needs strict and parameters (null where not sent).
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


def _or(value, default):
    return default if value is None else value


class Envelope:
    """What every Response object of one request carries."""

    def __init__(self, request: dict, *, store: bool, response_id: str = ""):
        self.id = response_id or new_id("resp")
        self.model = request["model"]
        self.created_at = int(time.time())
        self._request = request
        self.store = store
        text = request.get("text")
        fmt = text.get("format") if isinstance(text, dict) else None
        reasoning = request.get("reasoning")
        self._fixed = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "model": request["model"],
            "instructions": request.get("instructions"),
            "max_output_tokens": request.get("max_output_tokens"),
            "metadata": request.get("metadata") or {},
            "parallel_tool_calls": request.get("parallel_tool_calls") is not False,
            "previous_response_id": request.get("previous_response_id"),
            "reasoning": {"effort": reasoning.get("effort"), "summary": None}
            if isinstance(reasoning, dict)
            else None,
            "store": store,
            "temperature": _or(request.get("temperature"), 1.0),
            "text": {"format": fmt if isinstance(fmt, dict) else {"type": "text"}},
            "tool_choice": request.get("tool_choice") or "auto",
            "tools": [_tool_echo(t) for t in request.get("tools") or ()],
            "top_p": _or(request.get("top_p"), 1.0),
            "truncation": "disabled",
            "background": False,
        }
        if isinstance(request.get("user"), str):
            self._fixed["user"] = request["user"]

    def response(
        self,
        status: str,
        output: list[dict],
        *,
        usage: dict | None = None,
        incomplete: dict | None = None,
        error: dict | None = None,
    ) -> dict:
        response = {
            **self._fixed,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "incomplete_details": incomplete,
            "output": output,
        }
        # The description has usage as an object or absent, never null.
        if usage is not None:
            response["usage"] = usage
        return response


def from_chat(envelope: Envelope, answer: dict) -> dict:
    """A whole chat completion as the Response object."""
    choices = answer.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    status, incomplete = status_of(choice.get("finish_reason"))
    return envelope.response(
        status,
        output_items(choice.get("message") or {}, status),
        usage=usage(answer.get("usage")),
        incomplete=incomplete,
    )
