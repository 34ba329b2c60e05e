"""The Hugging Face hub as llmgw uses it: pin a revision, list a commit, read a few bytes."""

from llmgw.hub.client import (
    COMMIT_RE,
    HF_BASE_URL,
    HubClient,
    HubEntry,
    HubFileInfo,
    check_path,
    check_repo,
)
from llmgw.hub.errors import (
    EntryNotFound,
    HubAnswerInvalid,
    HubError,
    HubRefused,
    HubUnreachable,
    RepoNotFound,
    RevisionNotFound,
)

__all__ = [
    "COMMIT_RE",
    "HF_BASE_URL",
    "EntryNotFound",
    "HubAnswerInvalid",
    "HubClient",
    "HubEntry",
    "HubError",
    "HubFileInfo",
    "HubRefused",
    "HubUnreachable",
    "RepoNotFound",
    "RevisionNotFound",
    "check_path",
    "check_repo",
]
