"""Client API errors in OpenAI's shape, with the status and headers each one carries."""

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
