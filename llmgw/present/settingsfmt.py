"""How the kept settings read to people, in ``llmgw ctl config …`` and the console's Settings screen.

Both draw from the helpers here: a version as one line (``version_line``:
its number, who, when, why), what runs where (``in_force_lines``: this
control plane's version and each node's), a change as ``KEY: OLD → NEW``
(``change_text``), and the history's rows under ``HISTORY_COLUMNS``.
"""

from __future__ import annotations

import getpass
import os

from rich.text import Text

from llmgw.present.usagefmt import short_time
from proto.llmgw.v1 import SettingChange, SettingsInForce, SettingsVersionView

HISTORY_COLUMNS = ("VERSION", "AT", "BY", "FROM", "COMMENT", "CHANGED")
DIFF_COLUMNS = ("KEY", "WAS", "NOW")
# Keys a history row names before it counts the rest.
KEYS_SHOWN = 3
KIND_STYLE = {"added": "green", "removed": "red", "changed": "yellow"}

NO_CHANGE = "Nothing changed: the settings already say that. No version was written."
UNSET = "(not set)"


def author() -> str:
    """Who makes a change: the user running ctl or the console (sudo's caller under sudo)."""
    return os.environ.get("SUDO_USER") or getpass.getuser()


def version_line(v: SettingsVersionView | None) -> str:
    """ "version 3 · by alice · 2026-12-02 13:05:26 · smaller queue"."""
    if v is None:
        return "no version"
    parts = [f"version {v.version}", f"by {v.author or '?'}", short_time(v.at)]
    if v.comment:
        parts.append(v.comment)
    return " · ".join(parts)


def in_force_lines(f: SettingsInForce | None, latest: int = 0) -> list[str]:
    """Which version runs on this control plane and on each node that was sent one."""
    if f is None:
        return []
    here = f"in force on {f.control_plane or 'this control plane'}: version {f.version}"
    if f.since:
        here += f" since {short_time(f.since)}"
    if latest and f.version < latest:
        here += f" (version {latest} is on its way)"
    lines = [here]
    lines += [f"  not applied here: {p}" for p in f.problems]
    for a in f.agents:
        state = "ok" if a.ok else f"refused: {a.error}"
        lines.append(f"  node {a.node_id}: version {a.version} ({state})")
    return lines


def value_text(yaml_text: str) -> str:
    """A value as YAML, or that it is not set (null: the node's own, or no limit)."""
    return UNSET if yaml_text in ("", "null") else yaml_text


def change_text(c: SettingChange) -> Text:
    """``router.admission.bands[0].max_queue: 1000 → 3``, coloured by the kind of change."""
    text = Text(f"{c.key}: ", style="bold")
    old, new = value_text(c.old_yaml), value_text(c.new_yaml)
    if c.kind == "added":
        text.append(f"+ {new}", style=KIND_STYLE["added"])
    elif c.kind == "removed":
        text.append(f"- {old}", style=KIND_STYLE["removed"])
    else:
        text.append(old, style="dim")
        text.append(" → ")
        text.append(new, style=KIND_STYLE["changed"])
    return text


def changed_keys_text(keys: list[str]) -> str:
    """The keys a version changed: the first few, then how many more."""
    if not keys:
        return "—"
    shown = ", ".join(keys[:KEYS_SHOWN])
    return shown + (f" and {len(keys) - KEYS_SHOWN} more" if len(keys) > KEYS_SHOWN else "")


def history_cells(v: SettingsVersionView, in_force_version: int = 0) -> tuple[str, ...]:
    """One version's row under HISTORY_COLUMNS; the one in force is marked."""
    mark = " ●" if v.version == in_force_version else ""
    return (
        f"{v.version}{mark}",
        short_time(v.at),
        v.author or "?",
        str(v.parent_version) if v.parent_version else "—",
        v.comment,
        changed_keys_text(list(v.changed_keys)),
    )


def diff_cells(c: SettingChange) -> tuple[str, str, str]:
    """One change's row under DIFF_COLUMNS."""
    old = "" if c.kind == "added" else value_text(c.old_yaml)
    new = "" if c.kind == "removed" else value_text(c.new_yaml)
    return c.key, old, new
