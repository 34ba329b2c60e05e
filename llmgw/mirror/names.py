"""Names that come from outside and become paths in a mirror: refused unless plain.

A repository is ``org/name``, each one path element that does not start with
a dot (the mirror's own files are dotted) and holds no backslash or NUL. A
revision is a commit (40 hex) or a ref: a branch or tag of plain elements
(``main``, ``v1.0``, ``refs/pr/1``). A file inside a repository is a path of
plain elements. A wheel's or engine archive's name is one plain element.
"""

from __future__ import annotations

import re

from llmgw.errors import LlmgwError

COMMIT_RE = re.compile(r"[0-9a-f]{40}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
_ELEMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")
_REF_ELEMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")
# Kinds of thing a mirror holds.
KINDS = ("model", "wheel", "engine")


class NameRefused(LlmgwError):
    """A name that is not allowed to become a path."""

    # wire.ErrorDetail.code
    code = "invalid"


def plain(part: str) -> bool:
    """One path element: letters, digits, ``._+-``, not starting with a dot; never ``..``."""
    return bool(_ELEMENT_RE.fullmatch(part or ""))


def check_repo(repo: str) -> str:
    parts = (repo or "").split("/")
    if len(parts) != 2 or not all(plain(p) for p in parts):
        raise NameRefused(
            f"{repo!r} is not a repository name",
            hint="write org/name; each part letters, digits and ._+- , not starting with a dot",
        )
    return repo


def check_revision(revision: str) -> str:
    """A commit or a ref (``main``, ``v1``, ``refs/pr/1``); "" is refused (say main)."""
    rev = revision or ""
    if COMMIT_RE.fullmatch(rev):
        return rev
    parts = rev.split("/")
    if not rev or len(rev) > 255 or not all(_REF_ELEMENT_RE.fullmatch(p) for p in parts):
        raise NameRefused(
            f"{revision!r} is not a revision",
            hint="give a commit (40 hex digits), a branch or a tag",
        )
    return rev


def check_file_path(path: str) -> str:
    """A file inside a repository: plain elements separated by ``/``."""
    parts = (path or "").split("/")
    if not path or len(path) > 1024 or not all(plain(p) for p in parts):
        raise NameRefused(
            f"{path!r} is refused as a file of a repository",
            hint="every part of the path must be plain: letters, digits, ._+- , no leading dot",
        )
    return path


def check_file_name(name: str) -> str:
    """A wheel's or engine archive's name: one plain element."""
    if not plain(name):
        raise NameRefused(
            f"{name!r} is refused as a file name",
            hint="letters, digits and ._+- only, not starting with a dot",
        )
    return name


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise NameRefused(f"{kind!r} is not a kind the mirror holds", hint="model, wheel or engine")
    return kind
