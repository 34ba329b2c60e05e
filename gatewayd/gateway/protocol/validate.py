"""What a client request must look like before it is sent on: 400s that name the field.

``parse`` reads the body (``loads`` refuses JSON that is not safe to carry
on), ``check`` looks at the fields an engine would trip over. Both run on
every request, so they are plain ``isinstance`` checks over the parsed JSON,
no schema library. Only the fields named here are looked at: anything else
passes through to the engine untouched, since engines take fields of their
own (``top_k``, ``chat_template_kwargs``, …).

A field sent as ``null`` counts as not sent, as OpenAI's API has it. Nested
fields are named as ``messages[2].content`` in ``param``.

Why refuse here rather than leave it to the engine: an engine that is sent a
wrong type may answer 500 (the sim does for ``stream_options: 1``, vLLM for
some), which reads as our fault and is retried by clients; a 400 naming the
field tells the client what to fix.
"""

from __future__ import annotations

import json
import re

from gatewayd.gateway.protocol.errors import ApiError

# Deeper than this is refused. Python's json recurses, and gives up near 950
# levels with a RecursionError; a body just under that decoded here but broke
# the next json.dumps down the line (forward.py's, a 500). Requests nest a
# dozen levels; JSON schemas in tools a few dozen at most.
MAX_DEPTH = 128
# The largest count taken (max_tokens, n, dimensions): engines hold them in
# 32 bits, and a max_tokens of 10**400 overflowed the float of the key's
# tokens-a-minute bucket (limits.py): a 500.
MAX_COUNT = 2**31 - 1
# Seeds go to engines as 64-bit integers, signed or not.
SEED_RANGE = (-(2**63), 2**64 - 1)
# OpenAI's limits: choices per request, inputs per embeddings request.
MAX_N = 128
MAX_INPUTS = 2048
# Token ids are 32-bit in every engine; a model whose vocabulary is not known
# is held to that.
MAX_TOKEN_ID = 2**31 - 1


def _no_constant(name: str):
    # Python's json reads NaN and Infinity; JSON has neither, and a strict
    # engine (or our own re-encoding) would fail on them further on.
    raise ApiError(
        400,
        f"the body holds {name}, which is not JSON: send numbers as numbers",
        code="invalid_json",
    )


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
# A \uD800–\uDFFF escape: half of a UTF-16 pair. Paired halves decode to one
# character; an unpaired one becomes a string that cannot be encoded as UTF-8,
# on which engines fail (the sim's prompt hash raised UnicodeEncodeError: a 500).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_TOO_DEEP = f"the body nests deeper than {MAX_DEPTH} levels"


def loads(body: bytes) -> object:
    """A client's body as Python values, if it is JSON the gateway and engines can carry.

    ApiError(400) for what is not: not UTF-8, not JSON, NaN or Infinity,
    nested deeper than ``MAX_DEPTH``, or holding an unpaired surrogate.
    """
    try:
        # UTF-8 only (RFC 8259 §8.1); a leading byte order mark is forgiven.
        value = _DECODER.decode(body.decode("utf-8-sig"))
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not valid JSON", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, _TOO_DEEP, code="invalid_json") from None
    # Only a body with that many brackets can nest that deep: the walk is for few.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise ApiError(400, _TOO_DEEP, code="invalid_json")
    if _SURROGATE_ESCAPE.search(body) and _has_unpaired_surrogate(value):
        raise ApiError(
            400,
            "the body holds an unpaired UTF-16 surrogate (\\ud800–\\udfff), which is not text:"
            " encode characters outside the BMP as a pair, or send UTF-8",
            code="invalid_json",
        )
    return value


def parse(body: bytes) -> dict:
    """The request body as a JSON object with a model name; ApiError(400) otherwise."""
    request = loads(body)
    if not isinstance(request, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(
            400, "'model' must be a non-empty string", code="invalid_type", param="model"
        )
    stream = request.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", code="invalid_type", param="stream")
    return request


def _deeper_than(value: object, limit: int) -> bool:
    """Whether decoded JSON nests deeper than ``limit``: a walk level by level, no recursion.

    ~0.1 ms for 200 chat messages; a long list of scalars (token ids, texts)
    is passed over by ``set(map(type, …))``, which runs in C.
    """
    level = [value] if type(value) is dict or type(value) is list else []
    for _ in range(limit):
        below: list = []
        append = below.append
        for node in level:
            children = node.values() if type(node) is dict else node
            if len(children) > 8:
                kinds = set(map(type, children))
                if dict not in kinds and list not in kinds:
                    continue
            for child in children:
                if type(child) is dict or type(child) is list:
                    append(child)
        if not below:
            return False
        level = below
    return True


def _has_unpaired_surrogate(value: object) -> bool:
    # Only bodies with a surrogate escape get here (emoji from clients that
    # escape all non-ASCII, mostly); encoding the whole is the exact check.
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


def check(path: str, request: dict, *, vocab_size: int = 0) -> None:
    """The checks of one endpoint (``/v1/chat/completions`` …) beyond ``parse``'s.

    ``vocab_size``: the model's vocabulary (0: not known); token ids must be below it.
    """
    if path == "/v1/chat/completions":
        _messages(request.get("messages"))
    elif path == "/v1/completions":
        _prompt(request.get("prompt"), "prompt", vocab_size)
    elif path == "/v1/embeddings":
        _prompt(request.get("input"), "input", vocab_size)
        inputs = request["input"]
        # (One list of token ids is one input, however long.)
        if isinstance(inputs, list) and len(inputs) > MAX_INPUTS and not _is_int(inputs[0]):
            _fail("input", f"'input' holds more than {MAX_INPUTS} inputs", "invalid_value")
        _positive_int(request, "dimensions")
        _string(request, "encoding_format")
    _common(request)


def token_ids(path: str, request: dict, vocab_size: int) -> None:
    """Token ids of a prompt or input (already shaped as ``check`` has it) below ``vocab_size``.

    Run once the model's replicas are known, since the vocabulary is theirs.
    """
    value = request.get("prompt" if path == "/v1/completions" else "input")
    if vocab_size <= 0 or not isinstance(value, list) or not value:
        return
    name = "prompt" if path == "/v1/completions" else "input"
    if _is_int(value[0]):
        _token_ids(value, name, vocab_size)
    elif isinstance(value[0], list):
        for i, item in enumerate(value):
            _token_ids(item, f"{name}[{i}]", vocab_size)


def _common(request: dict) -> None:
    """Sampling and transport fields, wherever they are sent."""
    _positive_int(request, "max_tokens")
    _positive_int(request, "max_completion_tokens")
    _positive_int(request, "n")
    if (n := request.get("n")) is not None and n > MAX_N:
        _fail("n", f"'n' must be at most {MAX_N}", "invalid_value")
    _number(request, "temperature", 0, 2)
    _number(request, "top_p", 0, 1)
    _number(request, "frequency_penalty", -2, 2)
    _number(request, "presence_penalty", -2, 2)
    if (seed := request.get("seed")) is not None:
        if not _is_int(seed):
            _fail("seed", "'seed' must be an integer", "invalid_type")
        if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
            _fail("seed", "'seed' must fit in 64 bits", "invalid_value")
    stop = request.get("stop")
    if not (stop is None or isinstance(stop, str) or _strings(stop)):
        _fail("stop", "'stop' must be a string or a list of strings", "invalid_type")
    if (options := request.get("stream_options")) is not None:
        if not isinstance(options, dict):
            _fail("stream_options", "'stream_options' must be an object", "invalid_type")
        usage = options.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            _fail(
                "stream_options.include_usage",
                "'stream_options.include_usage' must be true or false",
                "invalid_type",
            )
    if (tools := request.get("tools")) is not None:
        if not isinstance(tools, list):
            _fail("tools", "'tools' must be a list of tools", "invalid_type")
        for i, tool in enumerate(tools):
            _tool(tool, f"tools[{i}]")
    choice = request.get("tool_choice")
    if choice is not None and not isinstance(choice, (str, dict)):
        _fail(
            "tool_choice",
            "'tool_choice' must be none, auto, required or an object naming a function",
            "invalid_type",
        )
    if (fmt := request.get("response_format")) is not None and not isinstance(fmt, dict):
        _fail(
            "response_format",
            'response_format must be an object such as {"type": "json_object"}',
            "invalid_type",
        )
    if (user := request.get("user")) is not None and not isinstance(user, str):
        _fail("user", "'user' must be a string", "invalid_type")


def _tool(tool: object, where: str) -> None:
    # Engines take function tools only: llama.cpp's server answered a 500 to
    # any other type ("custom" ones, which OpenAI's API has).
    if not isinstance(tool, dict):
        _fail(where, f"'{where}' must be an object", "invalid_type")
    if tool.get("type") != "function":
        _fail(
            f"{where}.type",
            f"'{where}.type' must be function: the engines here take function tools only",
            "invalid_value",
        )
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        _fail(
            f"{where}.function",
            f"'{where}.function' must be an object with a name",
            "invalid_type",
        )


def _tool_calls(calls: object, where: str) -> None:
    """An assistant turn's tool calls: function calls with a name and arguments as text."""
    if not isinstance(calls, list):
        _fail(where, f"'{where}' must be a list of tool calls", "invalid_type")
    for i, call in enumerate(calls):
        at = f"{where}[{i}]"
        if not isinstance(call, dict):
            _fail(at, f"'{at}' must be an object", "invalid_type")
        if call.get("type", "function") != "function":
            _fail(
                f"{at}.type",
                f"'{at}.type' must be function: the engines here take function calls only",
                "invalid_value",
            )
        function = call.get("function")
        if not isinstance(function, dict):
            _fail(f"{at}.function", f"'{at}.function' must be an object", "invalid_type")
        if not isinstance(function.get("name"), str):
            _fail(f"{at}.function.name", f"'{at}.function.name' must be a string", "invalid_type")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            _fail(
                f"{at}.function.arguments",
                f"'{at}.function.arguments' must be a string (JSON as text)",
                "invalid_type",
            )


def _messages(messages: object) -> None:
    if messages is None:
        _fail("messages", "'messages' is missing: send at least one message", "missing_field")
    if not isinstance(messages, list):
        _fail("messages", "'messages' must be a list of messages", "invalid_type")
    if not messages:
        _fail("messages", "'messages' is empty: send at least one message", "invalid_value")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            _fail(where, f"'{where}' must be an object with a role and content", "invalid_type")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            _fail(
                f"{where}.role",
                f"'{where}.role' must be a string such as user or assistant",
                "invalid_type",
            )
        if (calls := message.get("tool_calls")) is not None:
            _tool_calls(calls, f"{where}.tool_calls")
        content = message.get("content")
        if isinstance(content, str):
            continue
        if content is None:
            # An assistant turn that only calls tools has no content.
            if role == "assistant":
                continue
            _fail(f"{where}.content", f"'{where}.content' is missing", "missing_field")
        if not isinstance(content, list):
            _fail(
                f"{where}.content",
                f"'{where}.content' must be a string or a list of parts",
                "invalid_type",
            )
        for j, part in enumerate(content):
            _part(part, f"{where}.content[{j}]")


def _part(part: object, where: str) -> None:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        _fail(
            where,
            f'\'{where}\' must be an object with a type, such as {{"type": "text", "text": "…"}}',
            "invalid_type",
        )
    # Engines join the texts of all parts: a number there was a 500 in the sim.
    text = part.get("text")
    if (text is not None or part["type"] == "text") and not isinstance(text, str):
        _fail(f"{where}.text", f"'{where}.text' must be a string", "invalid_type")


_PROMPT_SHAPES = "a string, a list of strings, a list of token ids or a list of lists of token ids"


def _prompt(value: object, name: str, vocab_size: int = 0) -> None:
    """A prompt or an embedding input, in one of the four shapes OpenAI's API takes.

    Mixed lists (strings beside token ids) and deeper nesting are refused: vLLM
    refuses them, and llama.cpp's server, which reads some, failed on others
    with a 500. Token ids must be in the model's vocabulary: an id past it
    was a 500 from llama.cpp's server too.
    """
    if value is None:
        _fail(name, f"'{name}' is missing", "missing_field")
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        _fail(name, f"'{name}' must be {_PROMPT_SHAPES}", "invalid_type")
    if not value:
        _fail(name, f"'{name}' is empty", "invalid_value")
    first = value[0]
    if _is_int(first):
        _token_ids(value, name, vocab_size)
    elif isinstance(first, str):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                _fail(
                    f"{name}[{i}]",
                    f"'{name}[{i}]' must be a string like the items before it"
                    f" ('{name}' must be {_PROMPT_SHAPES})",
                    "invalid_type",
                )
    elif isinstance(first, list):
        for i, item in enumerate(value):
            where = f"{name}[{i}]"
            if not isinstance(item, list):
                _fail(
                    where,
                    f"'{where}' must be a list of token ids like the items before it"
                    f" ('{name}' must be {_PROMPT_SHAPES})",
                    "invalid_type",
                )
            if not item:
                _fail(where, f"'{where}' is an empty list of token ids", "invalid_value")
            _token_ids(item, where, vocab_size)
    else:
        _fail(f"{name}[0]", f"'{name}' must be {_PROMPT_SHAPES}", "invalid_type")


def _token_ids(ids: list, name: str, vocab_size: int) -> None:
    # min/max run in C: a list of 100,000 ids is checked in about a millisecond.
    top = vocab_size - 1 if vocab_size > 0 else MAX_TOKEN_ID
    if all(type(t) is int for t in ids) and 0 <= min(ids) and max(ids) <= top:
        return
    for i, t in enumerate(ids):
        where = f"{name}[{i}]"
        if not _is_int(t):
            _fail(where, f"'{where}' must be a token id (an integer)", "invalid_type")
        if not 0 <= t <= top:
            of = f"the model's vocabulary of {vocab_size} tokens" if vocab_size > 0 else "32 bits"
            _fail(where, f"'{where}' is {t}, not a token id of {of} (0 to {top})", "invalid_value")


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) for s in value)


def _is_int(value: object) -> bool:
    # JSON true is a Python int: it must not pass for a count.
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(request: dict, name: str) -> None:
    value = request.get(name)
    if value is None:
        return
    if not _is_int(value):
        _fail(name, f"'{name}' must be a positive integer", "invalid_type")
    if value < 1:
        _fail(name, f"'{name}' must be a positive integer, not {value}", "invalid_value")
    if value > MAX_COUNT:
        _fail(name, f"'{name}' must be at most {MAX_COUNT}", "invalid_value")


def _number(request: dict, name: str, low: float, high: float) -> None:
    value = request.get(name)
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        _fail(name, f"'{name}' must be a number from {low} to {high}", "invalid_type")
    # Written so that NaN, which compares false to everything, is refused too.
    if not low <= value <= high:
        _fail(name, f"'{name}' must be from {low} to {high}, not {value}", "invalid_value")


def _string(request: dict, name: str) -> None:
    value = request.get(name)
    if value is not None and not isinstance(value, str):
        _fail(name, f"'{name}' must be a string", "invalid_type")


def _fail(param: str, message: str, code: str):
    raise ApiError(400, message, code=code, param=param)
