"""A Responses API request (``POST /v1/responses``) as the chat completion an engine takes.

``to_chat`` checks what it converts and refuses what it cannot carry with a
400 naming the field (``input[2].type``, ``tools[0].type``, ``text.format``):
an engine would otherwise fail on it later, or quietly ignore it.

What maps to what:

- ``instructions`` → a system message first; ``input`` as a string → one user
  message; as items → messages (``developer`` is sent as ``system``: not every
  engine's chat template knows it), ``function_call`` items → the assistant's
  ``tool_calls`` (consecutive calls in one message), ``function_call_output``
  → a ``tool`` message; ``reasoning`` items are dropped (engines take no
  reasoning back);
- function ``tools`` and ``tool_choice`` → chat's nested ``function`` shape;
- ``text.format`` ``json_schema`` / ``json_object`` → ``response_format``;
- ``max_output_tokens`` → ``max_tokens``; ``reasoning.effort`` → ``reasoning_effort``.
"""

from __future__ import annotations

from gatewayd.gateway.protocol.errors import ApiError

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
# Request fields the conversion reads or that need nothing from the engine.
KNOWN = {
    "model", "input", "instructions", "tools", "tool_choice", "text", "max_output_tokens",
    "temperature", "top_p", "reasoning", "stream", "store", "previous_response_id",
    "metadata", "parallel_tool_calls", "user", "truncation", "include", "top_logprobs",
    "service_tier", "safety_identifier", "prompt_cache_key", "background", "stream_options",
    "max_tool_calls", "conversation", "prompt",
}  # fmt: skip
# OpenAI's own bound on metadata: 16 keys.
MAX_METADATA = 16
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


def fail(param: str, message: str, code: str = "invalid_value"):
    raise ApiError(400, message, code=code, param=param)


def check(request: dict) -> None:
    """The fields outside ``input``, checked before anything else is done with the request."""
    for name, why in (
        ("background", "background responses are not served: leave 'background' out"),
        ("conversation", "conversations are not kept: send the earlier items in 'input'"),
        ("prompt", "stored prompts are not served: send the prompt's text in 'input'"),
    ):
        if request.get(name) not in (None, False):
            fail(name, why, "unsupported_parameter")
    for name in ("instructions", "previous_response_id", "user"):
        value = request.get(name)
        if value is not None and not isinstance(value, str):
            fail(name, f"'{name}' must be a string", "invalid_type")
    store = request.get("store")
    if store is not None and not isinstance(store, bool):
        fail("store", "'store' must be true or false", "invalid_type")
    metadata = request.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > MAX_METADATA
        or not all(isinstance(v, str) for v in metadata.values())
    ):
        fail(
            "metadata",
            f"'metadata' must be an object of at most {MAX_METADATA} strings",
            "invalid_type",
        )
    for name in ("parallel_tool_calls",):
        value = request.get(name)
        if value is not None and not isinstance(value, bool):
            fail(name, f"'{name}' must be true or false", "invalid_type")
    if request.get("input") is None and not request.get("previous_response_id"):
        fail("input", "'input' is missing: send a string or a list of items", "missing_field")


def to_chat(request: dict, history: list[dict] | None = None) -> dict:
    """The chat completion for ``request``; ``history`` is the stored conversation
    (input and output items of the earlier responses) that goes before ``input``."""
    messages: list[dict] = []
    instructions = request.get("instructions")
    if instructions:
        messages.append({"role": "system", "content": instructions})
    items = list(history or ()) + input_items(request.get("input"))
    _items_into(messages, items, len(history or ()))
    if not messages:
        fail("input", "'input' holds no message to answer")
    chat: dict = {"model": request["model"], "messages": messages}
    if request.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    _number(request, chat, "temperature", "temperature", 0, 2)
    _number(request, chat, "top_p", "top_p", 0, 1)
    tokens = request.get("max_output_tokens")
    if tokens is not None:
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            fail("max_output_tokens", "'max_output_tokens' must be a positive integer")
        chat["max_tokens"] = tokens
    if (tools := request.get("tools")) is not None:
        chat_tools = [_tool(t, i) for i, t in enumerate(_list(tools, "tools"))]
        if chat_tools:
            chat["tools"] = chat_tools
    if (choice := request.get("tool_choice")) is not None:
        chat["tool_choice"] = _tool_choice(choice)
    parallel = request.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            fail("parallel_tool_calls", "'parallel_tool_calls' must be true or false")
        if "tools" in chat:
            chat["parallel_tool_calls"] = parallel
    if (fmt := response_format(request.get("text"))) is not None:
        chat["response_format"] = fmt
    if (reasoning := request.get("reasoning")) is not None:
        if not isinstance(reasoning, dict):
            fail("reasoning", '\'reasoning\' must be an object such as {"effort": "low"}')
        effort = reasoning.get("effort")
        if effort is not None:
            if effort not in ("none", "minimal", "low", "medium", "high", "xhigh"):
                fail("reasoning.effort", "'reasoning.effort' must be low, medium or high")
            chat["reasoning_effort"] = effort
    if isinstance(request.get("user"), str):
        chat["user"] = request["user"]
    return chat


def input_items(value: object) -> list[dict]:
    """``input`` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    items = _list(value, "input")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            fail(f"input[{i}]", f"'input[{i}]' must be an object", "invalid_type")
    return items


def _items_into(messages: list[dict], items: list[dict], first_input: int) -> None:
    for n, item in enumerate(items):
        # Names in errors count from the client's own input, not the stored history.
        where = f"input[{n - first_input}]" if n >= first_input else f"history[{n}]"
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            call = _function_call(item, where)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
                last["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                fail(f"{where}.call_id", f"'{where}.call_id' must name the function call")
            output = item.get("output")
            text = output if isinstance(output, str) else _parts_text(output, f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "reasoning":
            continue
        else:
            fail(
                f"{where}.type",
                f"'{where}.type' {kind!r} is not served: send message, function_call or"
                " function_call_output items",
                "unsupported_value",
            )


def _message(item: dict, where: str) -> dict:
    role = item.get("role")
    role = ROLES.get(role) if isinstance(role, str) else None
    if role is None:
        fail(f"{where}.role", f"'{where}.role' must be user, assistant, system or developer")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = _list(content, f"{where}.content")
    images = any(isinstance(p, dict) and p.get("type") == "input_image" for p in parts)
    if not images:
        return {"role": role, "content": _parts_text(parts, f"{where}.content")}
    chat_parts = []
    for i, part in enumerate(parts):
        if isinstance(part, dict) and part.get("type") == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                fail(
                    f"{where}.content[{i}].image_url",
                    "an input_image needs an image_url (a URL or a data: URL); file ids are"
                    " not served",
                )
            image = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            chat_parts.append({"type": "image_url", "image_url": image})
        else:
            chat_parts.append({"type": "text", "text": _part_text(part, f"{where}.content[{i}]")})
    return {"role": role, "content": chat_parts}


def _parts_text(parts: object, where: str) -> str:
    return "".join(_part_text(p, f"{where}[{i}]") for i, p in enumerate(_list(parts, where)))


def _part_text(part: object, where: str) -> str:
    if not isinstance(part, dict):
        fail(where, f"'{where}' must be a content part object", "invalid_type")
    kind = part.get("type")
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return part["refusal"]
    if kind not in _TEXT_PARTS:
        fail(
            f"{where}.type",
            f"'{where}.type' {kind!r} is not served: send input_text (or input_image)",
            "unsupported_value",
        )
    text = part.get("text")
    if not isinstance(text, str):
        fail(f"{where}.text", f"'{where}.text' must be a string", "invalid_type")
    return text


def _function_call(item: dict, where: str) -> dict:
    for name in ("call_id", "name"):
        if not isinstance(item.get(name), str) or not item[name]:
            fail(f"{where}.{name}", f"'{where}.{name}' must be a non-empty string")
    arguments = item.get("arguments", "")
    if not isinstance(arguments, str):
        fail(f"{where}.arguments", f"'{where}.arguments' must be a string of JSON")
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": arguments or "{}"},
    }


def _tool(tool: object, i: int) -> dict:
    where = f"tools[{i}]"
    if not isinstance(tool, dict):
        fail(where, f"'{where}' must be an object", "invalid_type")
    if tool.get("type") != "function":
        fail(
            f"{where}.type",
            f"'{where}.type' {tool.get('type')!r} is not served: only function tools run here",
            "unsupported_value",
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        fail(f"{where}.name", f"'{where}.name' must name the function")
    function: dict = {"name": name}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    parameters = tool.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            fail(f"{where}.parameters", f"'{where}.parameters' must be a JSON schema object")
        function["parameters"] = parameters
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice(choice: object) -> object:
    if choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            fail("tool_choice.name", "'tool_choice.name' must name a function")
        return {"type": "function", "function": {"name": name}}
    return fail(
        "tool_choice",
        '\'tool_choice\' must be none, auto, required or {"type": "function", "name": …}',
        "unsupported_value",
    )


def response_format(text: object) -> dict | None:
    """``text.format`` as chat's ``response_format``; None for plain text."""
    if text is None:
        return None
    if not isinstance(text, dict):
        fail("text", '\'text\' must be an object such as {"format": {"type": "text"}}')
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        fail("text.format", "'text.format' must be an object", "invalid_type")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        fail("text.format.type", "'text.format.type' must be text, json_object or json_schema")
    name, schema = fmt.get("name"), fmt.get("schema")
    if not isinstance(name, str) or not name:
        fail("text.format.name", "'text.format.name' must name the schema")
    if not isinstance(schema, dict):
        fail("text.format.schema", "'text.format.schema' must be a JSON schema object")
    json_schema: dict = {"name": name, "schema": schema}
    if isinstance(fmt.get("strict"), bool):
        json_schema["strict"] = fmt["strict"]
    if isinstance(fmt.get("description"), str):
        json_schema["description"] = fmt["description"]
    return {"type": "json_schema", "json_schema": json_schema}


def _number(request: dict, chat: dict, name: str, chat_name: str, low: float, high: float) -> None:
    value = request.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        fail(name, f"'{name}' must be a number from {low} to {high}")
    chat[chat_name] = value


def _list(value: object, where: str) -> list:
    if not isinstance(value, list):
        fail(where, f"'{where}' must be a list", "invalid_type")
    return value
