"""A batch's input file checked line by line as OpenAI checks it."""

from __future__ import annotations

import json

from gatewayd.batches.inputcheck import check_input

CHAT = "/v1/chat/completions"


def _line(cid="a", url=CHAT, method="POST", **body) -> bytes:
    body = {"model": "chat", **body}
    row = {"custom_id": cid, "method": method, "url": url, "body": body}
    return json.dumps(row).encode() + b"\n"


def test_a_good_file_gives_its_requests_in_order_and_the_models_they_name():
    data = _line("a") + b"\n" + _line("b", model="other") + _line("c")
    checked = check_input(data, CHAT, 100)
    assert checked.errors == []
    assert [(ln.line, ln.custom_id) for ln in checked.lines] == [(0, "a"), (1, "b"), (2, "c")]
    assert checked.models == ["chat", "other"]
    assert json.loads(checked.lines[1].body)["model"] == "other"


def test_each_fault_is_an_openai_batch_error_naming_its_line():
    data = (
        _line("a")
        + _line("a")
        + _line("b", method="GET")
        + _line("c", url="/v1/embeddings")
        + _line("d", stream=True)
        + b'{"custom_id": "e", "method": "POST", "url": "/v1/chat/completions"}\n'
        + b"[1, 2]\n"
    )
    errors = check_input(data, CHAT, 100).errors
    assert [(e["code"], e["line"], e["param"]) for e in errors] == [
        ("duplicate_custom_id", 2, "custom_id"),
        ("invalid_value", 3, "method"),
        ("invalid_url", 4, "url"),
        ("invalid_value", 5, "body.stream"),
        ("missing_required_parameter", 6, "body"),
        ("invalid_json_line", 7, None),
    ]
    assert "also on line 1" in errors[0]["message"]
    assert check_input(data, CHAT, 100).lines == []


def test_an_empty_file_and_one_over_the_request_cap_fail_in_words():
    assert [e["code"] for e in check_input(b"\n\n", CHAT, 10).errors] == ["empty_file"]
    over = check_input(_line("a") + _line("b") + _line("c"), CHAT, 2).errors
    assert over[0]["code"] == "too_many_requests" and over[0]["line"] == 3
    assert "batches.max_requests in server.yaml" in over[0]["message"]
