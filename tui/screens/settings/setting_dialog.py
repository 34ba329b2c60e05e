"""The Settings screen's form: one ``KEY=VALUE`` and why, as ``llmgw ctl config set`` takes them.

The key and the value are read here as ctl reads them (llmgw.settings.keys:
a dotted key, the value as YAML); whether the value is right for the key is
gatewayd's to say, with the whole document, in the words ctl prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.widgets import Input, Label

from llmgw.settings.keys import format_key, parse_assignment
from tui.screens.dialogs import FormDialog


@dataclass(frozen=True)
class SettingChange:
    assignment: str  # KEY=VALUE
    comment: str


class SettingDialog(FormDialog[SettingChange]):
    """Changes one key of the kept settings."""

    DEFAULT_CSS = "SettingDialog { align: center middle; }"
    OK_LABEL = "Keep"

    def __init__(self, key: str = "", value: str = "") -> None:
        super().__init__("Change a setting")
        self._key, self._value = key, value

    def fields(self) -> ComposeResult:
        yield Label("Key, e.g. router.admission.bands[0].max_queue or agents.nodes.gpu-1.log_level")
        yield Input(self._key, placeholder="router.admission.bands[0].max_queue", id="setting-key")
        yield Label("Value, as YAML: 200, 5m, debug, [a, b], {name: gold}; empty unsets it")
        yield Input(self._value, placeholder="200", id="setting-value")
        yield Label("Why (kept with the version)")
        yield Input(placeholder="", id="setting-comment")

    def result(self) -> SettingChange:
        key, value = self.field("#setting-key"), self.field("#setting-value")
        parts, _ = parse_assignment(f"{key}={value}")  # UsageError in ctl's words
        return SettingChange(f"{format_key(parts)}={value}", self.field("#setting-comment"))
