"""Keys of the settings document as people write them, and what they point at.

A key is dotted names with list positions in brackets:
``router.admission.bands[0].queue_ttl``, ``agents.nodes.gpu-1.log_level``.
A mapping's entry whose name holds a dot is written in brackets too:
``agents.nodes[gpu.1].log_level``. These functions work on the document
as plain values (``ClusterSettings.as_dict()``), never on the models, so
that a change is made first and checked as a whole after.

Pure: no I/O.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import yaml

from llmgw.errors import UsageError

Part = str | int

_BRACKET = re.compile(r"\[([^\]]*)\]")
_NAME = re.compile(r"[^.\[\]]+")


def parse_key(key: str) -> list[Part]:
    """``"router.admission.bands[0].queue_ttl"`` → ``["router", "admission", "bands", 0, "queue_ttl"]``."""
    text = key.strip()
    bad = UsageError(
        f"{key!r} is not a key",
        hint="write it as dotted names with positions in brackets, "
        "e.g. router.admission.bands[0].queue_ttl",
    )
    parts: list[Part] = []
    pos = 0
    while pos < len(text):
        if text[pos] == "[":
            m = _BRACKET.match(text, pos)
            if m is None or not m.group(1):
                raise bad
            inner = m.group(1)
            parts.append(int(inner) if inner.isdigit() else inner)
        else:
            if parts:
                if text[pos] != ".":
                    raise bad
                pos += 1
            m = _NAME.match(text, pos)
            if m is None:
                raise bad
            parts.append(m.group(0))
        pos = m.end()
    if not parts:
        raise UsageError("an empty key", hint="name a setting, e.g. router.admission.default_band")
    return parts


def format_key(parts: list[Part] | tuple[Part, ...]) -> str:
    """The key people write for ``parts`` (the inverse of ``parse_key``)."""
    out = ""
    for p in parts:
        if isinstance(p, int) or "." in p or "[" in p:
            out += f"[{p}]"
        else:
            out += f".{p}" if out else p
    return out


def _describe_keys(node: Any) -> str:
    if isinstance(node, dict):
        return ", ".join(str(k) for k in node) or "none yet"
    if isinstance(node, list):
        return f"positions 0 to {len(node) - 1}" if node else "none (the list is empty)"
    return "none: it is a single value"


def get_at(doc: Any, parts: list[Part]) -> Any:
    """The value at ``parts``; UsageError naming the key and what is there instead."""
    node = doc
    for n, p in enumerate(parts):
        where = format_key(parts[:n]) or "the document"
        if (
            isinstance(node, dict)
            and isinstance(p, str)
            and p in node
            or isinstance(node, list)
            and isinstance(p, int)
            and 0 <= p < len(node)
        ):
            node = node[p]
        else:
            raise UsageError(
                f"no setting {format_key(parts[: n + 1])}",
                hint=f"the keys of {where} are: {_describe_keys(node)}",
            )
    return node


def set_at(doc: dict[str, Any], parts: list[Part], value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with ``value`` at ``parts``.

    Missing mappings on the way are made (``agents.nodes.gpu-1.log_level`` on
    a node with no entry yet); whether the key is a setting at all is for the
    check of the whole document to say, which names it. A list grows by one
    at its end (``engines[2]`` of a list of two); a position further on is
    refused. ``None`` on a node's entry (``agents.nodes.gpu-1``) removes it.
    """
    out = copy.deepcopy(doc)
    node: Any = out
    for n, p in enumerate(parts[:-1]):
        nxt = parts[n + 1]
        if isinstance(node, dict) and isinstance(p, str):
            if node.get(p) is None:
                node[p] = [] if isinstance(nxt, int) else {}
            node = node[p]
        elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
            node = node[p]
        else:
            raise UsageError(
                f"no setting {format_key(parts[: n + 1])}",
                hint=f"the keys of {format_key(parts[:n]) or 'the document'} are: "
                f"{_describe_keys(node)}",
            )
    last = parts[-1]
    if isinstance(node, dict) and isinstance(last, str):
        if value is None and list(parts[:2]) == ["agents", "nodes"] and len(parts) == 3:
            node.pop(last, None)
        else:
            node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and 0 <= last <= len(node):
        if last == len(node):
            node.append(value)
        else:
            node[last] = value
    else:
        raise UsageError(
            f"no setting {format_key(parts)}",
            hint=f"the keys of {format_key(parts[:-1]) or 'the document'} are: "
            f"{_describe_keys(node)}",
        )
    return out


def parse_assignment(text: str) -> tuple[list[Part], Any]:
    """``KEY=VALUE`` as typed, the value read as YAML (``5m``, ``[a, b]``, ``{name: gold}``)."""
    key, sep, raw = text.partition("=")
    if not sep:
        raise UsageError(
            f"{text!r} is not KEY=VALUE",
            hint="e.g. llmgw ctl config set router.admission.bands[0].max_queue=200",
        )
    parts = parse_key(key)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e)
        raise UsageError(
            f"{format_key(parts)}: the value {raw!r} is not valid YAML ({problem})",
            hint="quote it for the shell: KEY='[{name: gold, priority: 300}]'",
        ) from None
    return parts, value


def flatten(node: Any, prefix: tuple[Part, ...] = ()) -> dict[str, Any]:
    """Every leaf of the document by its key, in the document's order.

    Lists of plain values and empty lists or mappings are leaves themselves.
    """
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, (*prefix, k)))
        return out
    if isinstance(node, list) and node and any(isinstance(v, dict | list) for v in node):
        out = {}
        for i, v in enumerate(node):
            out.update(flatten(v, (*prefix, i)))
        return out
    return {format_key(prefix): node}


@dataclass(frozen=True)
class Change:
    """One key that differs between two versions: "added", "removed" or "changed"."""

    key: str
    kind: str
    old: Any = None
    new: Any = None


def _filled(key: str, leaves: dict[str, Any]) -> bool:
    """Whether ``leaves`` holds keys beneath ``key`` (an empty mapping there became a full one)."""
    return any(k.startswith((key + ".", key + "[")) for k in leaves)


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """The keys that differ from ``old`` to ``new``, in the order the documents hold them.

    A key that comes or goes holding nothing (null, or an empty mapping that
    now has entries) is no change worth naming.
    """
    a, b = flatten(old), flatten(new)
    changes: list[Change] = []
    for key, value in b.items():
        if key not in a:
            if value is not None and not (value in ({}, []) and _filled(key, a)):
                changes.append(Change(key, "added", None, value))
        elif a[key] != value:
            changes.append(Change(key, "changed", a[key], value))
    for key, value in a.items():
        if key not in b and value is not None and not (value in ({}, []) and _filled(key, b)):
            changes.append(Change(key, "removed", value, None))
    return changes


def as_yaml(value: Any) -> str:
    """A value as YAML text: a plain value on one line, a mapping or list as a block."""
    if isinstance(value, dict | list) and value:
        return yaml.safe_dump(value, sort_keys=False).rstrip("\n")
    text = yaml.safe_dump(value, default_flow_style=True).rstrip("\n")
    return text.removesuffix("\n...").removesuffix("...").rstrip("\n")
