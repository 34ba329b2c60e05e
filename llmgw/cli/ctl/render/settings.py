"""How ``llmgw ctl config`` replies look to people (``--json`` prints the replies as they are)."""

from __future__ import annotations

from rich.console import Group
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from llmgw.present.output import renders
from llmgw.present.settingsfmt import (
    DIFF_COLUMNS,
    HISTORY_COLUMNS,
    NO_CHANGE,
    change_text,
    diff_cells,
    history_cells,
    in_force_lines,
    value_text,
    version_line,
)
from proto.llmgw.v1 import SettingsDiffReply, SettingsHistoryReply, SettingsReply, SettingsWritten


@renders(SettingsReply)
def _settings(reply: SettingsReply):
    head = Text(version_line(reply.version), style="bold")
    if reply.key:
        head.append(f"  {reply.key}", style="cyan")
    body = Syntax(value_text(reply.value_yaml), "yaml", background_color="default")
    lines = in_force_lines(reply.in_force, reply.latest_version)
    return Group(head, body, *(Text(line, style="dim") for line in lines))


@renders(SettingsWritten)
def _written(reply: SettingsWritten):
    if reply.unchanged:
        return Text(NO_CHANGE)
    head = Text(f"Kept {version_line(reply.version)}", style="bold green")
    changes = [change_text(c) for c in reply.changes]
    lines = in_force_lines(reply.in_force)
    return Group(head, *changes, *(Text(line, style="dim") for line in lines))


@renders(SettingsHistoryReply)
def _history(reply: SettingsHistoryReply):
    t = Table(title="Settings versions (● in force here)", title_justify="left")
    for col in HISTORY_COLUMNS:
        t.add_column(col, overflow="fold")
    for v in reply.versions:
        t.add_row(*history_cells(v, reply.in_force_version))
    return t


@renders(SettingsDiffReply)
def _diff(reply: SettingsDiffReply):
    title = f"Settings: version {reply.from_version} → version {reply.to_version}"
    if not reply.changes:
        return Text(f"{title}: no differences")
    t = Table(title=title, title_justify="left")
    for col in DIFF_COLUMNS:
        t.add_column(col, overflow="fold")
    for c in reply.changes:
        t.add_row(*diff_cells(c))
    return t
