"""Checking a settings document as a whole, and refusals that name the key and what it expects.

``check_document`` turns plain values (a YAML document, or the one in the
store with a change made to it) into ``ClusterSettings`` or refuses it with
every problem as ``KEY: what it expects``::

    router.admission.bands[0].queue_ttl: must be greater than 0 (got -1)

A key of server.yaml's bootstrap (``listen``, ``store``, ``pki`` …) or of
agent.yaml's (``agents.default.node_id``) is refused saying where it stays.
Rules across keys (the default band is one of the bands; a heartbeat comes
well within the not-ready grace) are checked once the keys are each right.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from llmgw.errors import UsageError
from llmgw.settings.document import (
    AGENT_BOOTSTRAP_KEYS,
    BOOTSTRAP_KEYS,
    AgentLiveSettings,
    ClusterSettings,
)
from llmgw.settings.keys import Part, format_key

# A heartbeat must come this many times within the not-ready grace: one lost
# beat, or one slow one, must never mark a node not ready.
BEATS_PER_GRACE = 2


class SettingsRefused(UsageError):
    """A settings document (or a change to one) that cannot be kept; ``problems`` name each key."""

    def __init__(self, problems: list[tuple[str, str]], *, hint: str = "") -> None:
        self.problems = problems
        message = "; ".join(f"{key}: {what}" if key else what for key, what in problems)
        super().__init__(
            message, hint=hint or "see every key and its value with: llmgw ctl config get"
        )


def _num(value: Any) -> str:
    """A bound or a value as people write it: 0, not 0.0."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, str) else str(value)


def _expectation(err: dict[str, Any]) -> str:
    """What a pydantic error says a key expects, in the words of our refusals."""
    kind, msg, ctx = err["type"], err["msg"], err.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "greater_than":
        return f"must be greater than {_num(ctx.get('gt'))}"
    if kind == "greater_than_equal":
        return f"must be at least {_num(ctx.get('ge'))}"
    if kind == "less_than_equal":
        return f"must be at most {_num(ctx.get('le'))}"
    if kind == "less_than":
        return f"must be less than {_num(ctx.get('lt'))}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "must be a whole number"
    if kind in ("float_parsing", "float_type"):
        return "must be a number"
    if kind in ("string_type",):
        return "must be a text"
    if kind in ("list_type",):
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a mapping of keys"
    if kind == "string_too_short":
        return "must not be empty"
    msg = msg.removeprefix("Value error, ")
    if msg.startswith("Input should be "):
        return "must be " + msg.removeprefix("Input should be ")
    return msg


def _extra(loc: tuple[Part, ...]) -> str:
    """Why a key that is no setting is refused: where it stays, or which keys there are."""
    top = loc[0] if loc else ""
    if len(loc) == 1 and top in BOOTSTRAP_KEYS:
        return (
            "is server.yaml's, read once at start, not a setting kept in the store; "
            "change it in server.yaml and restart the control plane"
        )
    if len(loc) >= 3 and top == "agents" and loc[-1] in AGENT_BOOTSTRAP_KEYS:
        if loc[-1] == "labels":
            return "is not kept here: set a node's labels with llmgw ctl node label NODE KEY=VALUE"
        return "stays in the node's agent.yaml: the agent needs it before it reaches the cluster"
    if top == "agents" and len(loc) >= 3:
        known = ", ".join(AgentLiveSettings.model_fields)
        return f"is not an agent setting; the agent settings are: {known}"
    return "is not a setting"


def _problems(e: ValidationError) -> list[tuple[str, str]]:
    out = []
    for err in e.errors():
        loc = tuple(err["loc"])
        key = format_key(list(loc))
        if err["type"] == "extra_forbidden":
            out.append((key, _extra(loc)))
            continue
        what = _expectation(err)
        if (
            "input" in err
            and err["type"] not in ("missing",)
            and not isinstance(err["input"], dict | list)
        ):
            what += f" (got {_num(err['input'])})"
        out.append((key, what))
    return out


def _cross_checks(s: ClusterSettings) -> list[tuple[str, str]]:
    """The rules that span keys, each named by the key to change."""
    out: list[tuple[str, str]] = []
    admission = s.router.admission
    bands = [b.name for b in admission.bands]
    if admission.default_band not in bands:
        what = f"must be one of the bands ({', '.join(bands)}), not {admission.default_band!r}"
        out.append(("router.admission.default_band", what))
    grace_s = s.nodes.not_ready_grace_s
    limit_s = grace_s / BEATS_PER_GRACE
    between = "or a node is marked not ready between two beats"
    if s.nodes.heartbeat_interval_s > limit_s:
        what = f"must be at most {limit_s:g} (half of nodes.not_ready_grace_s), {between}"
        out.append(("nodes.heartbeat_interval_s", what))
    if s.nodes.lost_grace_s < grace_s:
        what = f"must be at least nodes.not_ready_grace_s ({grace_s:g} s): a node is not ready"
        out.append(("nodes.lost_grace_s", what + " before it counts as lost"))
    entries: list[tuple[str, AgentLiveSettings]] = [("agents.default", s.agents.default)]
    entries += [
        (format_key(["agents", "nodes", node_id]), s.agents.for_node(node_id))
        for node_id in s.agents.nodes
    ]
    for where, agent in entries:
        beat_ms = agent.heartbeat_interval_ms
        if beat_ms is not None and beat_ms / 1000 > limit_s:
            what = (
                f"must be at most {limit_s * 1000:g} (half of nodes.not_ready_grace_s), {between}"
            )
            out.append((f"{where}.heartbeat_interval_ms", what))
    return out


def check_document(doc: Any) -> ClusterSettings:
    """The settings ``doc`` holds, checked as a whole; SettingsRefused naming every bad key."""
    if not isinstance(doc, dict):
        raise SettingsRefused([("", "the settings must be a mapping of keys at the top level")])
    try:
        settings = ClusterSettings.model_validate(doc)
    except ValidationError as e:
        raise SettingsRefused(_problems(e)) from None
    problems = _cross_checks(settings)
    if problems:
        raise SettingsRefused(problems)
    return settings


def load_document(text: str) -> ClusterSettings:
    """A settings document written as YAML (what ``ctl config edit`` opens), checked."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise SettingsRefused([("", f"the document is not valid YAML{where}: {problem}")]) from None
    return check_document({} if doc is None else doc)


def dump_document(settings: ClusterSettings) -> str:
    """The document as YAML, every key present, in the order of the schema."""
    return yaml.safe_dump(settings.as_dict(), sort_keys=False)
