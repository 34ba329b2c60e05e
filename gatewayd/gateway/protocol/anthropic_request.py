"""A ``/v1/messages`` request as the chat completions request an engine understands.

Pure conversion, no I/O. Where the two APIs do not meet one to one:

- Extended thinking reaches the model through its chat template
  (``enable_thinking``); ``disabled`` turns it off; not asked for, the template
  is left alone. Thinking blocks a client sends back in its history are dropped:
  chat completions has no place for them, and chat templates drop earlier turns'
  reasoning anyway.
- Tool results go first, as tool messages; what else the user turn holds, and
  any pictures a tool returned, follow in one user message.
- Text alone is sent as one string, blocks joined by a newline.
"""

from __future__ import annotations

import json

from gatewayd.gateway.protocol.anthropic import error_body

# Server tools (web_search_…, bash_…) run at Anthropic; only client tools, which
# the caller runs itself, can be declared to an engine.
_CLIENT_TOOL_TYPES = (None, "custom")


class AnthropicRequestError(Exception):
    """A /v1/messages body that cannot be served: what is wrong, and in which field."""

    status = 400

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict:
        return error_body(self.status, self.message)


def messages_to_chat(body: dict) -> dict:
    """The chat completions body that asks an engine what ``body`` asks Claude."""
    if not isinstance(body, dict):
        raise AnthropicRequestError("the request body must be a JSON object", "body")
    model = _required(body, "model", str)
    if not model:
        raise AnthropicRequestError("model is empty: name one that GET /v1/models lists", "model")
    max_tokens = _required(body, "max_tokens", int)
    if max_tokens < 1:
        raise AnthropicRequestError(
            f"max_tokens must be at least 1, not {max_tokens}", "max_tokens"
        )
    messages = _required(body, "messages", list)
    if not messages:
        raise AnthropicRequestError("messages is empty: send at least one user turn", "messages")

    chat_messages: list[dict] = []
    if (system := body.get("system")) is not None:
        chat_messages.append({"role": "system", "content": _system_text(system, "system")})
    for i, message in enumerate(messages):
        chat_messages.extend(_message(message, f"messages[{i}]"))
    chat: dict = {"model": model, "messages": chat_messages, "max_tokens": max_tokens}

    for name in ("temperature", "top_p"):
        if (value := _optional(body, name, (int, float))) is not None:
            chat[name] = value
    # Not OpenAI's, but vLLM, SGLang and llama.cpp all read it.
    if (top_k := _optional(body, "top_k", int)) is not None:
        chat["top_k"] = top_k
    if stops := _optional(body, "stop_sequences", list):
        chat["stop"] = [_check(s, str, f"stop_sequences[{i}]") for i, s in enumerate(stops)]
    if _optional(body, "stream", bool):
        chat["stream"] = True
        # Without it an engine never says how many tokens a stream took.
        chat["stream_options"] = {"include_usage": True}
    if tools := _optional(body, "tools", list):
        chat["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    if (choice := _optional(body, "tool_choice", dict)) is not None:
        chat.update(_tool_choice(choice))
    metadata = _optional(body, "metadata", dict) or {}
    if (user := _optional(metadata, "user_id", str, "metadata")) is not None:
        chat["user"] = user
    if (thinking := _optional(body, "thinking", dict)) is not None:
        chat["chat_template_kwargs"] = _thinking(thinking)

    last = chat_messages[-1] if chat_messages else {}
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        # An assistant turn last is a prefill the answer must continue; vLLM and
        # SGLang would otherwise open a new turn after it (llama.cpp continues it
        # unasked).
        chat["continue_final_message"] = True
        chat["add_generation_prompt"] = False
    return chat


def wants_thinking(body: dict) -> bool:
    """Whether the client asked for thinking blocks; not asked, reasoning is left out."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled")


def _thinking(thinking: dict) -> dict:
    kind = thinking.get("type")
    if kind == "disabled":
        return {"enable_thinking": False}
    if kind == "enabled":
        budget = _required(thinking, "budget_tokens", int, "thinking")
        # Chat completions has no budget field. Every engine hands chat_template_kwargs
        # to the template untouched and a template ignores what it does not use, so
        # the budget travels there as a hint, where an unknown top-level field would
        # be warned about (vLLM) or refused (strict servers).
        return {"enable_thinking": True, "thinking_budget": budget}
    if kind in ("adaptive", "between_tools"):
        return {"enable_thinking": True}
    raise AnthropicRequestError(
        f"thinking.type must be enabled, adaptive or disabled, not {kind!r}", "thinking.type"
    )


def _tool(tool: object, where: str) -> dict:
    _check(tool, dict, where)
    if tool.get("type") not in _CLIENT_TOOL_TYPES:
        raise AnthropicRequestError(
            f"{where}.type: {tool['type']!r} is a tool Anthropic runs itself, which the engines"
            " here cannot; declare it with name, description and input_schema and run it"
            " yourself",
            f"{where}.type",
        )
    function = {
        "name": _required(tool, "name", str, where),
        "parameters": _required(tool, "input_schema", dict, where),
    }
    if (description := _optional(tool, "description", str, where)) is not None:
        function["description"] = description
    return {"type": "function", "function": function}


def _tool_choice(choice: dict) -> dict:
    kind = choice.get("type")
    if kind == "auto":
        out: dict = {"tool_choice": "auto"}
    elif kind == "any":
        out = {"tool_choice": "required"}
    elif kind == "tool":
        name = _required(choice, "name", str, "tool_choice")
        out = {"tool_choice": {"type": "function", "function": {"name": name}}}
    elif kind == "none":
        return {"tool_choice": "none"}
    else:
        raise AnthropicRequestError(
            f"tool_choice.type must be auto, any, tool or none, not {kind!r}", "tool_choice.type"
        )
    if _optional(choice, "disable_parallel_tool_use", bool, "tool_choice"):
        out["parallel_tool_calls"] = False
    return out


def _system_text(system: object, where: str) -> str:
    if isinstance(system, str):
        return system
    blocks = _check(system, (str, list), where)
    texts = []
    for i, block in enumerate(blocks):
        kind = _block_type(block, f"{where}[{i}]")
        if kind != "text":
            raise AnthropicRequestError(
                f"{where}[{i}].type: a system prompt holds text blocks only, not {kind!r}",
                f"{where}[{i}].type",
            )
        texts.append(_required(block, "text", str, f"{where}[{i}]"))
    return _joined(texts)


def _message(message: object, where: str) -> list[dict]:
    _check(message, dict, where)
    role = message.get("role")
    content = message.get("content")
    if role == "system":
        return [{"role": "system", "content": _system_text(content, f"{where}.content")}]
    if role not in ("user", "assistant"):
        raise AnthropicRequestError(
            f"{where}.role must be user or assistant, not {role!r}", f"{where}.role"
        )
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = _check(content, (str, list), f"{where}.content")
    if not blocks:
        raise AnthropicRequestError(
            f"{where}.content is empty: send a string or at least one block", f"{where}.content"
        )
    if role == "assistant":
        return [_assistant(blocks, f"{where}.content")]
    return _user(blocks, f"{where}.content")


def _user(blocks: list, where: str) -> list[dict]:
    # OpenAI wants tool answers right after the assistant turn that called the
    # tools, so they go first (Anthropic puts them first too), the rest after.
    tool_messages: list[dict] = []
    parts: list[dict] = []
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]"
        kind = _block_type(block, at)
        if kind == "tool_result":
            message, images = _tool_result(block, at)
            tool_messages.append(message)
            parts.extend(images)
        elif kind in ("text", "image", "document"):
            parts.append(_part(block, kind, at))
        elif kind not in ("thinking", "redacted_thinking"):
            raise AnthropicRequestError(
                f"{at}.type: a user turn holds text, image, document and tool_result blocks,"
                f" not {kind!r}",
                f"{at}.type",
            )
    if not parts:
        return tool_messages
    return [*tool_messages, {"role": "user", "content": _content(parts)}]


def _assistant(blocks: list, where: str) -> dict:
    texts: list[str] = []
    calls: list[dict] = []
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]"
        kind = _block_type(block, at)
        if kind == "text":
            texts.append(_required(block, "text", str, at))
        elif kind == "tool_use":
            arguments = json.dumps(_required(block, "input", dict, at), ensure_ascii=False)
            function = {"name": _required(block, "name", str, at), "arguments": arguments}
            calls.append(
                {"id": _required(block, "id", str, at), "type": "function", "function": function}
            )
        elif kind not in ("thinking", "redacted_thinking"):
            raise AnthropicRequestError(
                f"{at}.type: an assistant turn holds text, tool_use and thinking blocks,"
                f" not {kind!r}",
                f"{at}.type",
            )
    # OpenAI allows a null content only beside tool calls.
    message: dict = {"role": "assistant", "content": _joined(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_result(block: dict, where: str) -> tuple[dict, list[dict]]:
    """The tool message for a tool_result, and the pictures it held.

    An OpenAI tool message carries text only, so pictures go to the user turn
    that follows it, where a vision model still sees them.
    """
    call_id = _required(block, "tool_use_id", str, where)
    content = block.get("content", "")
    texts: list[str] = []
    images: list[dict] = []
    if isinstance(content, str):
        texts.append(content)
    else:
        for i, part in enumerate(_check(content, (str, list), f"{where}.content")):
            at = f"{where}.content[{i}]"
            kind = _block_type(part, at)
            if kind == "text":
                texts.append(_required(part, "text", str, at))
            elif kind == "image":
                images.append(_part(part, kind, at))
            else:
                raise AnthropicRequestError(
                    f"{at}.type: a tool_result holds text and image blocks, not {kind!r}",
                    f"{at}.type",
                )
    return {"role": "tool", "tool_call_id": call_id, "content": _joined(texts)}, images


def _part(block: dict, kind: str, where: str) -> dict:
    if kind == "text":
        return {"type": "text", "text": _required(block, "text", str, where)}
    source = _required(block, "source", dict, where)
    source_type = source.get("type")
    at = f"{where}.source"
    if kind == "image" and source_type == "base64":
        media_type = _required(source, "media_type", str, at)
        url = f"data:{media_type};base64,{_required(source, 'data', str, at)}"
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "image" and source_type == "url":
        return {"type": "image_url", "image_url": {"url": _required(source, "url", str, at)}}
    if kind == "document" and source_type == "text":
        return {"type": "text", "text": _required(source, "data", str, at)}
    wanted = "base64 or url" if kind == "image" else "text, with a PDF's text in it"
    raise AnthropicRequestError(
        f"{at}.type: {kind} sources of type {source_type!r} cannot be served here;"
        f" send them as {wanted}",
        f"{at}.type",
    )


def _content(parts: list[dict]) -> str | list[dict]:
    # Text alone is sent as one string: text-only chat templates expect one, and
    # vLLM itself joins text parts with a newline.
    if all(part["type"] == "text" for part in parts):
        return _joined(part["text"] for part in parts)
    return parts


def _joined(texts) -> str:
    return "\n".join(texts)


def _block_type(block: object, where: str) -> str:
    _check(block, dict, where)
    return _required(block, "type", str, where)


def _required(obj: dict, key: str, kinds, where: str = ""):
    field = f"{where}.{key}" if where else key
    if obj.get(key) is None:
        raise AnthropicRequestError(f"{field} is missing", field)
    return _check(obj[key], kinds, field)


def _optional(obj: dict, key: str, kinds, where: str = ""):
    if obj.get(key) is None:
        return None
    return _check(obj[key], kinds, f"{where}.{key}" if where else key)


_JSON_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
}


def _check(value: object, kinds, field: str):
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    # JSON true is a Python int: it must not pass for max_tokens.
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    wanted = " or ".join(
        _JSON_NAMES[kind] for kind in kinds if not (kind is int and float in kinds)
    )
    got = (
        "null"
        if value is None
        else next(
            (name for kind, name in _JSON_NAMES.items() if type(value) is kind),
            type(value).__name__,
        )
    )
    raise AnthropicRequestError(f"{field} must be {wanted}, not {got}", field)
