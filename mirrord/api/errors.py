"""How the mirror answers what went wrong: the management API's ErrorBody, the hub's own shape.

Management routes answer ``{"error": {"code", "message", "hint"}}`` (wire.ErrorBody)
with a status from the code. Hub routes answer as the hub does, because
huggingface_hub picks its exception from ``X-Error-Code`` (RepoNotFound,
RevisionNotFound, EntryNotFound) and shows ``{"error": "..."}``'s text.
"""

from __future__ import annotations

from llmgw.errors import LlmgwError
from llmgw.mirror.names import NameRefused
from llmgw.mirror.wire import ErrorBody, ErrorDetail
from mirrord.http.auth import Refused
from mirrord.http.messages import Headers, Response

STATUS_OF_CODE = {
    "invalid": 400,
    # A valid request the mirror will not honour as asked (pickles, policy).
    "refused": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "quota": 507,
    "unavailable": 502,
    "internal": 500,
}


class ApiError(LlmgwError):
    """An answer other than success, raised by a route: code, message, hint."""

    def __init__(self, code: str, message: str, *, hint: str = "", status: int = 0) -> None:
        super().__init__(message, hint=hint)
        self.code = code
        self.status = status or STATUS_OF_CODE.get(code, 500)


def code_of(e: BaseException) -> str:
    """The wire code of an exception (the pull part's mapping where it knows it)."""
    if isinstance(e, NameRefused):
        return "invalid"
    try:
        from mirrord.pull.errors import code_of as pull_code_of
    except ImportError:  # pragma: no cover - the pull part is always there
        pull_code_of = None
    if pull_code_of is not None:
        code = pull_code_of(e)
        if code:
            return code
    code = getattr(e, "code", "")
    return code if isinstance(code, str) and code else "internal"


def wire_error(
    status: int, code: str, message: str, hint: str = "", headers: Headers | None = None
) -> Response:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, hint=hint))
    return Response.json(body.model_dump(mode="json"), status, headers)


def wire_error_of(e: BaseException) -> Response:
    """The management API's answer to an exception a route raised."""
    if isinstance(e, Refused):
        return wire_error(e.status, e.code, e.message, e.hint, e.challenge)
    if isinstance(e, ApiError):
        return wire_error(e.status, e.code, e.message, e.hint)
    if isinstance(e, LlmgwError):
        code = code_of(e)
        return wire_error(STATUS_OF_CODE.get(code, 500), code, e.message, e.hint)
    code = code_of(e)
    return wire_error(STATUS_OF_CODE.get(code, 500), code, str(e) or type(e).__name__)


def hub_error(status: int, error_code: str, message: str, headers: Headers | None = None):
    """An error as the hub sends it: X-Error-Code and {"error": message}."""
    head: Headers = [*(headers or [])]
    if error_code:
        head.append(("X-Error-Code", error_code))
    return Response.json({"error": message}, status, head)


def hub_refused(e: Refused) -> Response:
    """A missing or refused credential on a hub route.

    A 401 carries the hub's own X-Error-Message for a refused credential:
    without it huggingface_hub reports any 401 on a repository as
    "Repository Not Found", which sends people looking for the wrong thing.
    """
    text = f"{e.message}: {e.hint}" if e.hint else e.message
    head: Headers = [("X-Error-Message", "Invalid credentials in Authorization header")]
    if e.status == 403:
        head = [("X-Error-Message", e.message)]
    return hub_error(e.status, "", text, [*head, *e.challenge])
