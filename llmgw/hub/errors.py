"""What can go wrong asking a Hugging Face hub (or a mirror laid out like it).

HubError                 LlmgwError: the root of the hub's errors
├── RepoNotFound         X-Error-Code RepoNotFound (or 401/404 on the repository)
├── RevisionNotFound     X-Error-Code RevisionNotFound: no such branch, tag or commit
├── EntryNotFound        X-Error-Code EntryNotFound: no such file at that commit
├── HubRefused           401/403: gated or private, a login is needed
├── HubUnreachable       nothing answered, or a server error after retries
└── HubAnswerInvalid     an answer that is not what the hub's API gives
"""

from __future__ import annotations

from llmgw.errors import ExitCode, LlmgwError


class HubError(LlmgwError):
    """The hub could not tell or give what was asked."""


class RepoNotFound(HubError):
    exit_code = ExitCode.NOT_FOUND


class RevisionNotFound(HubError):
    exit_code = ExitCode.NOT_FOUND


class EntryNotFound(HubError):
    exit_code = ExitCode.NOT_FOUND


class HubRefused(HubError):
    exit_code = ExitCode.UNAUTHENTICATED


class HubUnreachable(HubError):
    exit_code = ExitCode.UNREACHABLE


class HubAnswerInvalid(HubError):
    """An answer that does not parse as the hub's (a proxy's error page, a truncated body)."""
