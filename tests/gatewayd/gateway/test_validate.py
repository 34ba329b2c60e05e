"""Request checks before a request is sent on: 400s that name the field, and nothing else."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatewayd.gateway.protocol import validate
from gatewayd.gateway.protocol.anthropic_request import messages_to_chat
from gatewayd.gateway.protocol.errors import ApiError

CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
USER = [{"role": "user", "content": "hello"}]


def refusal(path: str, request: dict) -> ApiError:
    with pytest.raises(ApiError) as err:
        validate.check(path, request)
    assert err.value.status == 400
    return err.value


def parse_refusal(body: bytes) -> ApiError:
    with pytest.raises(ApiError) as err:
        validate.parse(body)
    assert err.value.status == 400 and err.value.code == "invalid_json"
    return err.value


# ---- parse ---------------------------------------------------------------------


def test_a_body_that_is_not_a_json_object_is_refused():
    for body in (b"{not json", b"[1, 2]", b'"chat"', b"", b"\xff\xfe{}"):
        parse_refusal(body)


def test_nan_and_infinity_are_not_json_though_python_reads_them():
    # A NaN temperature reached the engine as the bare word NaN, which strict
    # parsers refuse with a 500.
    err = parse_refusal(b'{"model": "m", "temperature": NaN}')
    assert "NaN" in err.message
    parse_refusal(b'{"model": "m", "x": [-Infinity]}')


def test_a_body_nested_too_deep_is_a_400_not_a_recursion_error():
    # json.loads raises RecursionError past ~950 levels: it was a 500 with a traceback.
    err = parse_refusal(b'{"model": "m", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert "nests deeper than 128 levels" in err.message


def test_128_levels_pass_and_129_are_refused_however_the_body_is_laid_out():
    # Bodies just under Python's limit decoded here, then broke forward.py's
    # json.dumps of the stream request (a 500): the limit leaves room below it.
    def body(levels: int) -> bytes:
        # The object itself is the first level.
        return (
            b'{"model": "m", "x": '
            + b'[{"a": ' * ((levels - 1) // 2)
            + (b"[]" if levels % 2 == 0 else b"0")
            + b"}]" * ((levels - 1) // 2)
            + b"}"
        )

    validate.parse(body(128))
    parse_refusal(body(129))
    validate.parse(b'{"model": "m", "x": ' + b"[" * 127 + b"]" * 127 + b"}")
    parse_refusal(b'{"model": "m", "x": ' + b"[" * 128 + b"]" * 128 + b"}")
    # Many brackets, little depth: many messages, many token lists.
    wide = {"model": "m", "input": [[1, 2, 3]] * 5000, "messages": [{"a": [{}]}] * 500}
    validate.parse(json.dumps(wide).encode())
    # Brackets in a text are not nesting.
    assert validate.parse(json.dumps({"model": "m", "x": "[" * 500}).encode())["x"]


def test_no_depth_gets_a_recursion_error_through_not_even_with_a_surrogate_to_look_for():
    # Found by the API fuzz: ~945 levels decoded, but re-encoding them to look
    # for unpaired surrogates overflowed the stack: a 500. Where that happens
    # depends on how deep the caller's stack already is, so both are swept.
    def called_from(frames: int, body: bytes):
        return validate.parse(body) if frames == 0 else called_from(frames - 1, body)

    for frames in range(0, 40, 3):
        for depth in range(880, 1000, 2):
            nest = b"[" * depth + b"]" * depth
            body = b'{"model": "m", "user": "\\ud83d\\ude00", "x": ' + nest + b"}"
            try:
                called_from(frames, body)
            except ApiError as e:
                assert e.status == 400 and "nests deeper" in e.message


def test_an_unpaired_surrogate_is_refused_but_a_pair_and_a_literal_backslash_u_pass():
    # The sim hashed the prompt with str.encode() and answered 500 on "\ud800".
    err = parse_refusal(b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800"}]}')
    assert "surrogate" in err.message
    parse_refusal(b'{"model": "m", "user": "\\udc00\\ud800"}')
    parse_refusal(b'{"model": "m", "user": "x"}'.replace(b"x", b"\xed\xa0\x80"))
    pair = validate.parse(b'{"model": "m", "user": "\\ud83d\\ude00"}')
    assert pair["user"] == "\U0001f600"
    literal = validate.parse(b'{"model": "m", "user": "\\\\ud800"}')
    assert literal["user"] == "\\ud800"


def test_a_utf8_byte_order_mark_is_forgiven():
    assert validate.parse(b'\xef\xbb\xbf{"model": "m"}') == {"model": "m"}


def test_model_must_be_a_non_empty_string_and_stream_a_boolean_or_null():
    for body in ({}, {"model": ""}, {"model": 7}, {"model": None}):
        with pytest.raises(ApiError) as err:
            validate.parse(json.dumps(body).encode())
        assert err.value.param == "model"
    with pytest.raises(ApiError) as err:
        validate.parse(b'{"model": "m", "stream": "yes"}')
    assert err.value.param == "stream"
    assert validate.parse(b'{"model": "m", "stream": null}')["stream"] is None


# ---- check -----------------------------------------------------------------------

WRONG = [
    (CHAT, {}, "messages", "missing_field"),
    (CHAT, {"messages": "hi"}, "messages", "invalid_type"),
    (CHAT, {"messages": []}, "messages", "invalid_value"),
    (CHAT, {"messages": ["hi"]}, "messages[0]", "invalid_type"),
    (CHAT, {"messages": [{"content": "hi"}]}, "messages[0].role", "invalid_type"),
    (CHAT, {"messages": [{"role": 1, "content": "hi"}]}, "messages[0].role", "invalid_type"),
    (CHAT, {"messages": [*USER, {"role": "user"}]}, "messages[1].content", "missing_field"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type"),
    (
        CHAT,
        {"messages": [{"role": "user", "content": [{"text": "x"}]}]},
        "messages[0].content[0]",
        "invalid_type",
    ),
    (
        CHAT,
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
        "messages[0].content[0].text",
        "invalid_type",
    ),
    (CHAT, {"messages": USER, "max_tokens": 0}, "max_tokens", "invalid_value"),
    (CHAT, {"messages": USER, "max_tokens": 2.5}, "max_tokens", "invalid_type"),
    (CHAT, {"messages": USER, "max_tokens": True}, "max_tokens", "invalid_type"),
    (
        CHAT,
        {"messages": USER, "max_completion_tokens": "9"},
        "max_completion_tokens",
        "invalid_type",
    ),
    (CHAT, {"messages": USER, "temperature": "hot"}, "temperature", "invalid_type"),
    (CHAT, {"messages": USER, "temperature": 2.01}, "temperature", "invalid_value"),
    (CHAT, {"messages": USER, "temperature": -1}, "temperature", "invalid_value"),
    (CHAT, {"messages": USER, "top_p": 1.5}, "top_p", "invalid_value"),
    (CHAT, {"messages": USER, "top_p": False}, "top_p", "invalid_type"),
    (CHAT, {"messages": USER, "n": -1}, "n", "invalid_value"),
    # A max_tokens of 10**400 overflowed the float of a tokens-a-minute bucket: a 500.
    (CHAT, {"messages": USER, "max_tokens": 10**400}, "max_tokens", "invalid_value"),
    (
        CHAT,
        {"messages": USER, "max_completion_tokens": 2**31},
        "max_completion_tokens",
        "invalid_value",
    ),
    (CHAT, {"messages": USER, "seed": "1"}, "seed", "invalid_type"),
    (CHAT, {"messages": USER, "seed": 2**64}, "seed", "invalid_value"),
    (CHAT, {"messages": USER, "stop": 3}, "stop", "invalid_type"),
    (CHAT, {"messages": USER, "stop": ["a", 1]}, "stop", "invalid_type"),
    (CHAT, {"messages": USER, "stream_options": 1}, "stream_options", "invalid_type"),
    (
        CHAT,
        {"messages": USER, "stream_options": {"include_usage": "yes"}},
        "stream_options.include_usage",
        "invalid_type",
    ),
    (CHAT, {"messages": USER, "tools": {}}, "tools", "invalid_type"),
    (CHAT, {"messages": USER, "tools": ["f"]}, "tools[0]", "invalid_type"),
    (CHAT, {"messages": USER, "tool_choice": 1}, "tool_choice", "invalid_type"),
    (CHAT, {"messages": USER, "response_format": "json"}, "response_format", "invalid_type"),
    (CHAT, {"messages": USER, "user": 42}, "user", "invalid_type"),
    (COMPLETIONS, {}, "prompt", "missing_field"),
    (COMPLETIONS, {"prompt": {"text": "x"}}, "prompt", "invalid_type"),
    (COMPLETIONS, {"prompt": []}, "prompt", "invalid_value"),
    (COMPLETIONS, {"prompt": ["a", None]}, "prompt[1]", "invalid_type"),
    (COMPLETIONS, {"prompt": "a", "max_tokens": -5}, "max_tokens", "invalid_value"),
    (EMBEDDINGS, {}, "input", "missing_field"),
    (EMBEDDINGS, {"input": 3}, "input", "invalid_type"),
    (EMBEDDINGS, {"input": [True]}, "input[0]", "invalid_type"),
    (EMBEDDINGS, {"input": "a", "dimensions": 0}, "dimensions", "invalid_value"),
    (EMBEDDINGS, {"input": "a", "encoding_format": 1}, "encoding_format", "invalid_type"),
]


@pytest.mark.parametrize(("path", "request_", "param", "code"), WRONG)
def test_a_wrong_field_is_refused_naming_it(path, request_, param, code):
    err = refusal(path, {"model": "m", **request_})
    assert err.param == param
    assert err.code == (code or "invalid_type")
    # The message names the field too, for people reading it in a log.
    assert param.split("[")[0].split(".")[0] in err.message
    body = json.loads(err.body())["error"]
    assert body["type"] == "invalid_request_error" and body["param"] == param


RIGHT = [
    (CHAT, {"messages": USER}),
    (
        CHAT,
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "what is"}]},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                # An assistant turn that only calls a tool has no content.
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ],
            "max_tokens": 2**31 - 1,
            "max_completion_tokens": 5,
            "temperature": 0,
            "top_p": 1.0,
            "n": 2,
            "seed": -(2**63),
            "stop": ["\n"],
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "response_format": {"type": "json_object"},
            "user": "u-1",
        },
    ),
    # null is not sent, as OpenAI has it.
    (CHAT, {"messages": USER, "temperature": None, "stop": None, "tools": None, "user": None}),
    # Fields the gateway does not know go to the engine untouched.
    (CHAT, {"messages": USER, "top_k": "anything", "chat_template_kwargs": {"x": 1}}),
    (COMPLETIONS, {"prompt": "once upon", "stop": "\n", "echo": True}),
    (COMPLETIONS, {"prompt": [1, 2, 3]}),
    (COMPLETIONS, {"prompt": [[1, 2], [3]]}),
    (EMBEDDINGS, {"input": "a"}),
    (EMBEDDINGS, {"input": ["a", "b"], "dimensions": 8, "encoding_format": "base64"}),
]


@pytest.mark.parametrize(("path", "request_"), RIGHT)
def test_a_well_formed_request_passes(path, request_):
    validate.check(path, {"model": "m", **request_})


def test_what_the_anthropic_conversion_makes_passes_the_chat_checks():
    # /v1/messages is converted first, then checked as a chat completion: a
    # conversation with a tool call must not be refused for its empty content.
    chat = messages_to_chat(
        {
            "model": "m",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "be brief"}],
            "stop_sequences": ["END"],
            "stream": True,
            "metadata": {"user_id": "u-1"},
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "what is 6 x 7?"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "http://x/y.png"},
                        },
                    ],
                },
            ],
        }
    )
    validate.check(CHAT, validate.parse(json.dumps(chat).encode()))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
FIELDS = st.sampled_from(
    [
        "messages",
        "prompt",
        "input",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "stream_options",
        "tools",
        "tool_choice",
        "response_format",
        "user",
        "seed",
        "dimensions",
        "encoding_format",
    ]
)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    path=st.sampled_from([CHAT, COMPLETIONS, EMBEDDINGS, "/v1/other"]),
    fields=st.dictionaries(FIELDS, JSON, max_size=6),
)
def test_any_json_is_passed_or_refused_with_a_400_naming_a_field(path, fields):
    try:
        validate.check(path, {"model": "m", **fields})
    except ApiError as e:
        assert e.status == 400 and e.param and e.code
        assert e.param.split("[")[0].split(".")[0] in fields or e.code == "missing_field"
