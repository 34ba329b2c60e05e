"""Request fields held to the bounds their API publishes, before anything is forwarded.

A new user asked ``POST /v1/completions`` for ``"logprobs": 213450922`` (OpenAI's
description allows 5): llama.cpp's server answered after 32 s with 125 MB of
the whole vocabulary's log-probabilities for every token. An engine takes what
it is sent; the gateway, which speaks OpenAI's and Anthropic's APIs, refuses
what those APIs refuse, with a 400 in the API's error shape naming the field.

- ``check(path, request)``: an OpenAI-shaped request (chat completions,
  completions, embeddings, Responses) against the bounds of its request schema
  in OpenAI's description (``openai_table.OPENAI``, made from the description
  and held to it by a test), less ``openai_table.NOT_APPLIED``.
- ``check_messages(request)``: an Anthropic Messages request against the bounds
  Anthropic documents (``anthropic.py``).

A field sent as null counts as not sent. These run on every request: a dict
lookup per bounded field, and long lists (token ids) looked at in C.
"""

from __future__ import annotations

from gatewayd.gateway.protocol.bounds.anthropic import check_messages
from gatewayd.gateway.protocol.bounds.openai_table import NOT_APPLIED, OPENAI, SCHEMAS
from gatewayd.gateway.protocol.errors import ApiError

__all__ = ["APPLIED", "check", "check_messages", "check_value"]

_KIND_WORDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "array": "a list",
    "object": "an object",
    "boolean": "true or false",
}
_PY_KINDS = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def _applied() -> dict[str, dict[str, dict]]:
    table: dict[str, dict[str, dict]] = {}
    for schema, fields in OPENAI.items():
        kept: dict[str, dict] = {}
        for field, shape in fields.items():
            shape = {
                kind: {
                    key: limit
                    for key, limit in bounds.items()
                    if (schema, field, kind, key) not in NOT_APPLIED
                }
                for kind, bounds in shape.items()
            }
            kept[field] = shape
        table[schema] = kept
    return table


# Schema → field → kind → bounds, as the gateway holds requests to them.
APPLIED = _applied()
_BY_PATH = {path: APPLIED[schema] for path, schema in SCHEMAS.items()}


def check(path: str, request: dict) -> None:
    """ApiError(400) naming the first field of ``request`` past its bound in OpenAI's description."""
    fields = _BY_PATH.get(path)
    if fields is None:
        return
    get = request.get
    for field, shape in fields.items():
        value = get(field)
        if value is not None:
            check_value(value, shape, field)


def check_value(value: object, shape: dict, where: str) -> None:
    """``value`` of the kinds and within the bounds ``shape`` gives; ApiError(400) naming ``where``."""
    kind = _PY_KINDS.get(type(value), "")
    bounds = shape.get(kind)
    if bounds is None:
        if kind == "integer":
            bounds = shape.get("number")
        elif kind == "number" and value.is_integer():  # JSON's 2.0 is an integer
            bounds = shape.get("integer")
        if bounds is None:
            kinds = " or ".join(_KIND_WORDS[k] for k in shape)
            _fail(where, f"'{where}' must be {kinds}", "invalid_type")
    if not bounds:
        return
    if kind == "array":
        _array(value, bounds, where)
    elif kind == "string":
        _range(len(value), bounds, where, "minLength", "maxLength", "characters")
    elif kind == "object":
        _range(len(value), bounds, where, "minProperties", "maxProperties", "fields")
    else:
        _number(value, bounds, where)
    enum = bounds.get("enum")
    if enum is not None and value not in enum:
        _fail(
            where,
            f"'{where}' must be one of {', '.join(map(str, enum))}, not {value!r}",
            "invalid_value",
        )


def _number(value, bounds: dict, where: str) -> None:
    low, high = bounds.get("minimum"), bounds.get("maximum")
    # Written so that NaN, which compares false to everything, is refused too.
    if low is not None and not value >= low:
        _fail(where, f"'{where}' must be at least {low}, not {value}", "invalid_value")
    if high is not None and not value <= high:
        _fail(where, f"'{where}' must be at most {high}, not {value}", "invalid_value")
    low, high = bounds.get("exclusiveMinimum"), bounds.get("exclusiveMaximum")
    if low is not None and not value > low:
        _fail(where, f"'{where}' must be above {low}, not {value}", "invalid_value")
    if high is not None and not value < high:
        _fail(where, f"'{where}' must be below {high}, not {value}", "invalid_value")


def _range(size: int, bounds: dict, where: str, low_key: str, high_key: str, unit: str) -> None:
    low, high = bounds.get(low_key), bounds.get(high_key)
    if low is not None and size < low:
        _fail(where, f"'{where}' must hold at least {low} {unit}, not {size}", "invalid_value")
    if high is not None and size > high:
        _fail(where, f"'{where}' must hold at most {high} {unit}, not {size}", "invalid_value")


def _array(value: list, bounds: dict, where: str) -> None:
    _range(len(value), bounds, where, "minItems", "maxItems", "items")
    items = bounds.get("items")
    if items is None or not value:
        return
    # Items of kinds that are not bounded need no look each: a list of 100,000
    # token ids is passed over by set(map(type, …)), which runs in C.
    free = {t for t, k in _PY_KINDS.items() if items.get(k) == {}}
    if "number" in items and items["number"] == {}:
        free.add(int)
    if set(map(type, value)) <= free:
        return
    for i, item in enumerate(value):
        check_value(item, items, f"{where}[{i}]")


def _fail(param: str, message: str, code: str):
    raise ApiError(400, message, code=code, param=param)
