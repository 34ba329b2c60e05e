"""What can go wrong getting weights onto a node, and the name and URL checks before it.

WeightsError          LlmgwError: weights that could not be fetched or found, or were refused
├── PickleRefused     a pickle format, on a model without allow_pickle
├── UnsafeName        a name from outside that is not one plain path element
├── ChecksumMismatch  bytes whose sha256 (or git id, or size) is not the one pinned or listed
├── DownloadFailed    a server that refused, or a network that cut, after retries
├── MirrorsLack       no mirror of the cluster holds an hf: source (and the hub is not allowed)
└── WeightsMissing    a local source that is not there
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from llmgw.errors import ExitCode, LlmgwError


class WeightsError(LlmgwError):
    """Weights that could not be fetched or found, or were refused."""


class PickleRefused(WeightsError):
    """Weights in a pickle format, on a model without allow_pickle."""


class UnsafeName(WeightsError):
    """A model or file name that would not be one plain path element."""


class ChecksumMismatch(WeightsError):
    """Weights whose sha256 is not the one the model pins (or the hub lists)."""


class DownloadFailed(WeightsError):
    """A download that the server refused or the network cut, after retries."""


class MirrorsLack(WeightsError):
    """An hf: source that none of the cluster's mirrors holds, on a model kept off the internet."""

    exit_code = ExitCode.NOT_FOUND


class WeightsMissing(WeightsError):
    """A local source that is not there."""


def check_name(name: str, what: str) -> str:
    """``name`` if it is one path element not starting with a dot, else UnsafeName."""
    if not name or name.startswith(".") or "/" in name or "\\" in name or "\x00" in name:
        raise UnsafeName(
            f"{what} {name!r} is refused: names from outside must be one path element "
            "not starting with a dot",
            hint="rename it, or give a source whose file name is plain",
        )
    return name


def check_rel_path(path: str, what: str) -> str:
    """A relative path of plain elements (a file within a repository), else UnsafeName."""
    for part in (path or "").split("/"):
        check_name(part, what)
    return path


def redact(url: str) -> str:
    """A URL fit for a log line or an error: no user:password, no query (tokens live there)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
