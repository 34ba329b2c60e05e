"""Why a pull or an upload was refused, each with the management API's error code.

    PullError            code "internal"; the root of these
    ├── PullRefused      "refused": pickles not allowed, a kind that is uploaded, not pulled
    ├── PullInvalid      "invalid": a source or artifact that is not what it claims
    │   └── DigestMismatch   a file whose bytes do not match the upstream's digest, twice
    └── UpstreamFailed   "unavailable" / "not_found": the hub or mirror pulled from

Errors of the hub client (llmgw.hub) keep their own classes; ``code_of`` gives
every exception its wire code in one place.
"""

from __future__ import annotations

from llmgw.errors import LlmgwError
from llmgw.hub import (
    EntryNotFound,
    HubError,
    HubRefused,
    RepoNotFound,
    RevisionNotFound,
)


class PullError(LlmgwError):
    code = "internal"

    def __init__(self, message: str, *, hint: str = "", code: str = "") -> None:
        super().__init__(message, hint=hint)
        if code:
            self.code = code


class PullRefused(PullError):
    code = "refused"


class PullInvalid(PullError):
    code = "invalid"


class DigestMismatch(PullInvalid):
    """A file fetched twice whose bytes never matched what the upstream's tree lists."""


class UpstreamFailed(PullError):
    code = "unavailable"


def code_of(e: BaseException) -> str:
    """The wire code (wire.ErrorDetail.code) an exception is answered with."""
    if isinstance(e, RepoNotFound | RevisionNotFound | EntryNotFound):
        return "not_found"
    if isinstance(e, HubRefused):
        return "refused"
    if isinstance(e, HubError):
        return "unavailable"
    code = getattr(e, "code", "")
    if isinstance(code, str) and code:
        return code
    # names.NameRefused has no code of its own: a name is invalid input.
    if type(e).__name__ == "NameRefused":
        return "invalid"
    return "internal"
