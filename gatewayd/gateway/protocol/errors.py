"""Client API errors in OpenAI's shape, with the status and headers each one carries.

``code`` is a string or null, as OpenAI's API description has it (engines
write the HTTP status there as a number). ``engine_error`` turns an engine's
error answer into the gateway's: its refusal a 400 in its own words, its
failure a 502.
"""

from __future__ import annotations

import json

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "service_unavailable",
    504: "timeout",
}


class ApiError(Exception):
    """An answer other than the engine's: status, OpenAI-shaped body, extra headers."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after_s: int | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.retry_after_s = retry_after_s

    def body(self) -> bytes:
        return json.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": _TYPES.get(self.status, "api_error"),
                    "param": self.param,
                    "code": self.code,
                }
            }
        ).encode()

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after_s is None:
            return []
        return [(b"retry-after", str(self.retry_after_s).encode())]


# An engine's 4xx that says the gateway (not the client) got something wrong:
# the engine key refused, a path or model the engine does not serve, a timeout.
_ENGINE_FAULTS = frozenset((401, 403, 404, 405, 407, 408, 501))
# What llama.cpp's server answers with a 500 though the request was at fault
# (it throws while reading the request): a 400 in its words.
_REFUSALS_AS_500 = (
    "Failed to parse messages",
    "Failed to parse tools",
    "image input is not supported",
    "audio input is not supported",
)
# The engine's own words are cut here: some engines put a whole traceback there.
MAX_ENGINE_WORDS = 1000


def engine_words(data: bytes) -> tuple[str, str | None]:
    """(message, param) of an engine's error body, whichever shape it wrote.

    OpenAI's ``{"error": {"message"…}}`` (llama.cpp, newer vLLM), vLLM's older
    ``{"object": "error", "message"…}``, FastAPI's ``{"detail"…}``, or text.
    """
    text = data.decode("utf-8", errors="replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        return text[:MAX_ENGINE_WORDS], None
    if not isinstance(body, dict):
        return text[:MAX_ENGINE_WORDS], None
    error = body.get("error")
    where = error if isinstance(error, dict) else body
    message = where.get("message")
    if not isinstance(message, str):
        detail = body.get("detail")
        message = error if isinstance(error, str) else detail if isinstance(detail, str) else ""
        if not message and detail is not None:
            message = json.dumps(detail)
    param = where.get("param")
    return message[:MAX_ENGINE_WORDS], param if isinstance(param, str) else None


def engine_error(
    status: int,
    data: bytes,
    *,
    model: str,
    retry_after_s: float | None = None,
    who: str = "the engine",
) -> ApiError:
    """The error the client gets for an engine's answer of ``status`` (not 200).

    ``who`` names what answered in the message ("the outside provider").
    """
    words, param = engine_words(data)
    if status == 429:
        wait = int(retry_after_s) if retry_after_s else None
        return ApiError(
            429,
            words or f"{who} serving {model!r} is busy",
            code="rate_limited",
            retry_after_s=wait,
        )
    refused = 400 <= status < 500 and status not in _ENGINE_FAULTS
    if refused or (status == 500 and words.startswith(_REFUSALS_AS_500)):
        return ApiError(400, words or f"{who} serving {model!r} refused the request", param=param)
    said = f": {words}" if words else ""
    return ApiError(502, f"{who} serving {model!r} failed ({status}){said}", code="upstream_error")
