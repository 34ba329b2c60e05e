"""A batch's input file checked as OpenAI checks it, before any request is sent.

Each line is a JSON object ``{"custom_id", "method": "POST", "url", "body"}``;
custom_ids are unique, every url is the batch's endpoint, and the body names
a model. A file that breaks any of these fails the batch, with one error per
line at fault in OpenAI's BatchError shape ({code, message, param, line},
lines counted from 1), and nothing is sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gatewayd.batches.book import Line

# Errors listed for one file at most: enough to fix it, not a copy of it.
MAX_ERRORS = 100
CUSTOM_ID_MAX = 512


@dataclass
class Checked:
    lines: list[Line] = field(default_factory=list)
    # The models the requests name, first seen first.
    models: list[str] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)


def _error(code: str, message: str, *, param: str | None = None, line: int | None = None) -> dict:
    return {"code": code, "message": message, "param": param, "line": line}


def _line_errors(obj, number: int, endpoint: str) -> list[dict]:
    if not isinstance(obj, dict):
        return [_error("invalid_json_line", "the line is not a JSON object", line=number)]
    errors = []
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        errors.append(
            _error(
                "missing_required_parameter",
                "custom_id is required, a string",
                param="custom_id",
                line=number,
            )
        )
    elif len(custom_id) > CUSTOM_ID_MAX:
        errors.append(
            _error(
                "invalid_value",
                f"custom_id is over {CUSTOM_ID_MAX} characters",
                param="custom_id",
                line=number,
            )
        )
    if obj.get("method") != "POST":
        errors.append(_error("invalid_value", "method must be POST", param="method", line=number))
    url = obj.get("url")
    if url != endpoint:
        errors.append(
            _error(
                "invalid_url",
                f"the url {url!r} is not the batch's endpoint {endpoint}: a batch's requests"
                " all go to the endpoint it was created with",
                param="url",
                line=number,
            )
        )
    body = obj.get("body")
    if not isinstance(body, dict):
        errors.append(
            _error(
                "missing_required_parameter",
                "body is required, a JSON object (the request)",
                param="body",
                line=number,
            )
        )
    else:
        if not isinstance(body.get("model"), str) or not body["model"]:
            errors.append(
                _error(
                    "missing_required_parameter",
                    "body.model is required",
                    param="body.model",
                    line=number,
                )
            )
        if body.get("stream") is True:
            errors.append(
                _error(
                    "invalid_value",
                    "a batch's requests cannot stream: leave body.stream out or false",
                    param="body.stream",
                    line=number,
                )
            )
    return errors


def check_input(data: bytes, endpoint: str, max_requests: int) -> Checked:
    """The requests of an input file, or the errors that fail its batch."""
    out = Checked()
    seen: dict[str, int] = {}
    models: dict[str, None] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if len(out.errors) >= MAX_ERRORS:
            break
        if not raw.strip():
            continue
        if len(out.lines) >= max_requests:
            out.errors.append(
                _error(
                    "too_many_requests",
                    f"the file holds more than {max_requests} requests, the most a batch may"
                    " (batches.max_requests in server.yaml): split it into several batches",
                    line=number,
                )
            )
            break
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            out.errors.append(
                _error("invalid_json_line", "the line is not valid JSON", line=number)
            )
            continue
        errors = _line_errors(obj, number, endpoint)
        custom_id = obj.get("custom_id") if isinstance(obj, dict) else None
        if isinstance(custom_id, str) and custom_id:
            if custom_id in seen:
                errors.append(
                    _error(
                        "duplicate_custom_id",
                        f"the custom_id {custom_id!r} is also on line {seen[custom_id]}:"
                        " each request's custom_id must be unique",
                        param="custom_id",
                        line=number,
                    )
                )
            seen.setdefault(custom_id, number)
        if errors:
            out.errors.extend(errors)
            continue
        body = obj["body"]
        models.setdefault(body["model"], None)
        out.lines.append(
            Line(len(out.lines), obj["custom_id"], json.dumps(body).encode(), body["model"])
        )
    if not out.lines and not out.errors:
        out.errors.append(_error("empty_file", "the input file holds no requests"))
    out.errors = out.errors[:MAX_ERRORS]
    out.models = list(models)
    if out.errors:
        out.lines = []
    return out
