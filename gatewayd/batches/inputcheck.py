"""A batch's input file checked as OpenAI checks it, before any request is sent.

Each line is a JSON object ``{"custom_id", "method": "POST", "url", "body"}``;
custom_ids are unique, every url is the batch's endpoint, and the body names
a model. A file that breaks any of these fails the batch, with one error per
line at fault in OpenAI's BatchError shape ({code, message, param, line},
lines counted from 1), and nothing is sent.

The runner feeds ``InputCheck`` the file a page at a time as it reads it from
the store, and keeps none of its requests; it reads them again, a window at a
time, as it sends them (``parse_request``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from gatewayd.batches.book import Line

# Errors listed for one file at most: enough to fix it, not a copy of it.
MAX_ERRORS = 100
CUSTOM_ID_MAX = 512


@dataclass
class Checked:
    # The requests, when asked to keep them (check_input); the runner reads them again as it sends.
    lines: list[Line] = field(default_factory=list)
    # How many requests the file holds (0 when it has errors).
    total: int = 0
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


def _digest(custom_id: str) -> int:
    """64 bits of the custom_id: what the duplicate check keeps of each, not the id."""
    return int.from_bytes(hashlib.blake2b(custom_id.encode(), digest_size=8).digest(), "big")


class InputCheck:
    """The check of one input file, fed its lines in order (a page at a time: the file is
    never held whole). What it keeps is bounded by the request cap: 64 bits and a line
    number per custom_id seen (a collision of two ids in 64 bits would be reported as a
    duplicate: about 1 in 10^9 for a file of 100,000)."""

    def __init__(self, endpoint: str, max_requests: int, *, keep_lines: bool = False) -> None:
        self._endpoint, self._max = endpoint, max_requests
        self._keep = keep_lines
        self._seen: dict[int, int] = {}
        self._models: dict[str, None] = {}
        self.out = Checked()
        self.total = 0
        self.stopped = False

    def feed(self, lines: list[tuple[int, bytes]]) -> bool:
        """Check these (line number from 1, raw line); False once no more need reading."""
        out = self.out
        for number, raw in lines:
            if len(out.errors) >= MAX_ERRORS:
                self.stopped = True
                return False
            if not raw.strip():
                continue
            if self.total >= self._max:
                out.errors.append(
                    _error(
                        "too_many_requests",
                        f"the file holds more than {self._max} requests, the most a batch may"
                        " (batches.max_requests in server.yaml): split it into several batches",
                        line=number,
                    )
                )
                self.stopped = True
                return False
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                out.errors.append(
                    _error("invalid_json_line", "the line is not valid JSON", line=number)
                )
                continue
            errors = _line_errors(obj, number, self._endpoint)
            custom_id = obj.get("custom_id") if isinstance(obj, dict) else None
            if isinstance(custom_id, str) and custom_id:
                digest = _digest(custom_id)
                first = self._seen.get(digest)
                if first is not None:
                    errors.append(
                        _error(
                            "duplicate_custom_id",
                            f"the custom_id {custom_id!r} is also on line {first}:"
                            " each request's custom_id must be unique",
                            param="custom_id",
                            line=number,
                        )
                    )
                else:
                    self._seen[digest] = number
            if errors:
                out.errors.extend(errors)
                continue
            body = obj["body"]
            self._models.setdefault(body["model"], None)
            if self._keep:
                out.lines.append(
                    Line(self.total, obj["custom_id"], json.dumps(body).encode(), body["model"])
                )
            self.total += 1
        return True

    def result(self) -> Checked:
        out = self.out
        if not self.total and not out.errors:
            out.errors.append(_error("empty_file", "the input file holds no requests"))
        out.errors = out.errors[:MAX_ERRORS]
        out.models = list(self._models)
        out.total = 0 if out.errors else self.total
        if out.errors:
            out.lines = []
        self._seen.clear()
        return out


def parse_request(raw: bytes, index: int) -> Line:
    """A checked line of an input file as the request the runner sends (ValueError if it
    is not one: the file is not the one checked)."""
    obj = json.loads(raw)
    body = obj["body"]
    return Line(index, obj["custom_id"], json.dumps(body).encode(), body["model"])


def check_input(data: bytes, endpoint: str, max_requests: int) -> Checked:
    """The requests of an input file held whole, or the errors that fail its batch."""
    check = InputCheck(endpoint, max_requests, keep_lines=True)
    check.feed(list(enumerate(data.split(b"\n"), start=1)))
    return check.result()
