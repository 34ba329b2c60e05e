"""Node labels: what they may be made of, and ``k=v`` as typed on a command line.

Keys and values follow Kubernetes' rules for labels, which operators already
know and which keep them safe as metric labels, YAML keys and table cells:

- a key is a name of 1-63 letters, digits, ``-``, ``_`` or ``.``, starting and
  ending with a letter or digit, optionally after a prefix and a slash, the
  prefix a DNS name of at most 253 characters (``example.com/rack``);
- a value is empty or follows the same rule as a name (63 characters at most).

``llmgw.role`` (the role a node is kept for, e.g. ``judge``) is such a key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from llmgw.errors import UsageError

NAME_MAX = 63
PREFIX_MAX = 253
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key, in words; None when it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix or len(prefix) > PREFIX_MAX:
            return f"label key {key!r}: the part before '/' must be a DNS name of 1-253 characters"
        if not all(_DNS_LABEL.fullmatch(p) for p in prefix.split(".")):
            return f"label key {key!r}: {prefix!r} is not a DNS name (lower case, digits, '-', '.')"
    if not _NAME.fullmatch(name):
        return (
            f"label key {key!r}: the name must be 1-{NAME_MAX} letters, digits, '-', '_' or '.',"
            " starting and ending with a letter or digit"
        )
    return None


def value_problem(key: str, value: str) -> str | None:
    """Why ``value`` is not a label value, in words; None when it is one (empty is)."""
    if value == "" or _NAME.fullmatch(value):
        return None
    return (
        f"label {key}={value!r}: a value must be at most {NAME_MAX} letters, digits, '-', '_'"
        " or '.', starting and ending with a letter or digit (or empty)"
    )


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels, unchanged, or ValueError naming the first that is not one."""
    for k, v in labels.items():
        problem = key_problem(k) if isinstance(k, str) else f"label key {k!r} is not text"
        if problem is None and not isinstance(v, str):
            problem = f"label {k}: the value {v!r} must be text (quote it in YAML: {k}: '{v}')"
        if problem is None:
            problem = value_problem(k, v)
        if problem:
            raise ValueError(problem)
    return dict(labels)


def parse_assignments(items: Iterable[str], *, flag: str = "") -> dict[str, str]:
    """``["zone=a", "llmgw.role=judge"]`` into a map, checked; UsageError on the first bad one."""
    out: dict[str, str] = {}
    where = f"{flag} " if flag else ""
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(
                f"{where}{item!r} is not KEY=VALUE",
                hint="write a label as zone=a (remove one with --rm KEY)",
            )
        key, value = key.strip(), value.strip()
        try:
            check_labels({key: value})
        except ValueError as e:
            raise UsageError(str(e)) from None
        out[key] = value
    return out


def check_keys(keys: Iterable[str]) -> list[str]:
    """Label keys to remove, checked; UsageError on the first that is not a key."""
    out = []
    for k in keys:
        problem = key_problem(k.strip())
        if problem:
            raise UsageError(problem)
        out.append(k.strip())
    return out


def labels_text(labels: Mapping[str, str]) -> str:
    """``zone=a, llmgw.role=judge`` (sorted), or ``-`` for none."""
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def effective(own: Mapping[str, str], operator: Mapping[str, str]) -> dict[str, str]:
    """A node's labels: its agent.yaml's, with the operator's (ctl node label) over them."""
    return {**own, **operator}
