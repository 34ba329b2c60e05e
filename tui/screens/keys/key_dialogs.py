"""The Keys screen's dialogs: what ``llmgw ctl keys …`` and ``org|team|project …`` take, as forms.

Each form checks what was typed with the command's own parsers
(``llmgw.present.keyfmt``) and is dismissed with what the admin call needs, or None
on Escape; the screen makes the call. A mistake stays in the form, in the
command's words, with the fields as typed. ``SecretShown`` shows a new
key's secret, the one time it is ever shown. The form and the question every
screen shares are in ``tui/screens/dialogs.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from llmgw.errors import UsageError
from llmgw.present.keyfmt import (
    LIMIT_NAMES,
    NOUNS,
    describe_limits,
    kind_of_path,
    limit_text,
    limits_change,
    parse_duration,
    parse_money,
    parse_retention,
    retention_text,
    secret_text,
)
from proto.llmgw.v1 import KeyView, LimitsView, TenantView
from tui.screens.dialogs import FormDialog
from tui.screens.shell import KeyFooter


@dataclass(frozen=True)
class NewLevel:
    """An org, team or project to create (``create_tenant``)."""

    kind: str
    path: str
    parents: bool


@dataclass(frozen=True)
class NewKey:
    """A key to make in ``project`` (``create_key``); 0 and None mean none."""

    project: str
    name: str
    models: list[str]
    expires_in_s: int
    rpm: int
    tpm: int
    budget_month_micros: int | None


@dataclass(frozen=True)
class LimitsEdit:
    """What ``set_limits`` is sent: the values changed, and the limits lifted."""

    limits: LimitsView
    clear: list[str]


class LevelDialog(FormDialog[NewLevel]):
    """Creates an organization, team or project; the path's shape says which."""

    OK_LABEL = "Create"

    def __init__(self, start: str = "") -> None:
        super().__init__("New organization, team or project")
        self._start = start

    def fields(self) -> ComposeResult:
        yield Label("Path: ORG, ORG/TEAM or ORG/TEAM/PROJECT")
        yield Input(self._start, placeholder="Acme/ml/search", id="level-path")
        yield Checkbox("Make missing parents too", id="level-parents")
        yield Static(id="level-kind", classes="dialog-status")

    def on_mount(self) -> None:
        super().on_mount()
        self._show_kind(self._start)

    def on_input_changed(self, event: Input.Changed) -> None:
        self._show_kind(event.value.strip())

    def _show_kind(self, path: str) -> None:
        try:
            text = f"Creates the {NOUNS[kind_of_path(path)]} {path}"
        except UsageError:
            text = ""
        self.query_one("#level-kind", Static).update(text)

    def result(self) -> NewLevel:
        path = self.field("#level-path")
        kind = kind_of_path(path)
        return NewLevel(kind, path, self.query_one("#level-parents", Checkbox).value)


class RenameDialog(FormDialog[str]):
    """A new last part for a level's path; what is beneath it and its keys move with it."""

    OK_LABEL = "Rename"

    def __init__(self, level: TenantView) -> None:
        super().__init__(f"Rename {NOUNS.get(level.kind, level.kind)} {level.path}")
        self.level = level

    def fields(self) -> ComposeResult:
        yield Label("New name (the last part of the path; keys and levels beneath move with it)")
        yield Input(self.level.path.rsplit("/", 1)[-1], id="rename-name")

    def result(self) -> str:
        name = self.field("#rename-name")
        if not name or "/" in name:
            raise UsageError(f"{name!r} is not a name: one part of a path, without '/'")
        return name


class KeyDialog(FormDialog[NewKey]):
    """The options of ``llmgw ctl keys create`` for a key in one project."""

    OK_LABEL = "Create key"

    def __init__(self, project: str) -> None:
        super().__init__(f"New key in {project}")
        self.project = project

    def fields(self) -> ComposeResult:
        yield Label("Name: what the key is for")
        yield Input(placeholder="e.g. search-frontend", id="key-name")
        yield Label("Models, comma separated")
        yield Input(placeholder="all models", id="key-models")
        with Horizontal(classes="form-row"):
            with Vertical():
                yield Label("Expires in (90d, 12h)")
                yield Input(placeholder="never", id="key-expires")
            with Vertical():
                yield Label("Budget a month (UTC)")
                yield Input(placeholder="no budget (e.g. 25)", id="key-budget")
        with Horizontal(classes="form-row"):
            with Vertical():
                yield Label("Requests/min")
                yield Input(placeholder="no limit", type="integer", id="key-rpm")
            with Vertical():
                yield Label("Tokens/min")
                yield Input(placeholder="no limit", type="integer", id="key-tpm")

    def _count(self, selector: str, what: str) -> int:
        text = self.field(selector)
        if not text:
            return 0
        if not text.isdigit():
            raise UsageError(f"{what}: {text!r} is not a whole number")
        return int(text)

    def result(self) -> NewKey:
        budget = self.field("#key-budget")
        return NewKey(
            project=self.project,
            name=self.field("#key-name"),
            models=[m.strip() for m in self.field("#key-models").split(",") if m.strip()],
            expires_in_s=parse_duration(self.field("#key-expires")),
            rpm=self._count("#key-rpm", "requests/min"),
            tpm=self._count("#key-tpm", "tokens/min"),
            budget_month_micros=parse_money(budget) if budget else None,
        )


class RotateDialog(FormDialog[int]):
    """How long the old secret keeps working once the new one is made (``rotate_key``)."""

    OK_LABEL = "Rotate"

    def __init__(self, key: KeyView) -> None:
        super().__init__(f"Rotate {key.key_id}")
        self.key = key

    def fields(self) -> ComposeResult:
        yield Static(
            f"A new key with the same project, models and limits as {self.key.key_id} "
            f"({self.key.prefix}…); its secret is shown once."
        )
        yield Label("Old secret keeps working for (e.g. 1h, 24h; 0 stops it now)")
        yield Input("1h", id="rotate-overlap")

    def result(self) -> int:
        overlap = self.field("#rotate-overlap")
        return 0 if overlap == "0" else parse_duration(overlap)


class RetentionDialog(FormDialog[int]):
    """How long a project keeps the responses its keys ask to store (``set_retention``)."""

    OK_LABEL = "Set retention"

    def __init__(self, level: TenantView) -> None:
        super().__init__(f"Stored responses of {level.path}")
        self.level = level

    def fields(self) -> ComposeResult:
        yield Static(
            "Answers of /v1/responses sent with store: true are kept this long, so"
            " previous_response_id and GET /v1/responses/{id} work. Off keeps none and"
            " forgets those kept."
        )
        yield Label("Keep for (e.g. 24h, 7d; off)")
        yield Input(retention_text(self.level.retain_responses_s), id="retention-keep")

    def result(self) -> int:
        return parse_retention(self.field("#retention-keep"))


class LimitsDialog(FormDialog[LimitsEdit]):
    """The limits of a key or a level; only the fields changed are sent, an emptied one lifts."""

    OK_LABEL = "Set limits"
    HELP = (
        "Only the fields you change are sent. Empty a field to lift that limit (unlimited). "
        "Enter confirms · Esc cancels"
    )
    FIELD_IDS: ClassVar[dict[str, str]] = {
        "rpm": "limits-rpm",
        "tpm": "limits-tpm",
        "budget_day_micros": "limits-budget-day",
        "budget_month_micros": "limits-budget-month",
    }

    def __init__(self, scope: str, current: LimitsView | None) -> None:
        super().__init__(f"Limits of {scope}")
        self.scope = scope
        self.current = current

    def fields(self) -> ComposeResult:
        yield Static(f"Now: {describe_limits(self.current)}")
        pairs = list(self.FIELD_IDS.items())
        for row in (pairs[:2], pairs[2:]):
            with Horizontal(classes="form-row"):
                for name, field_id in row:
                    with Vertical():
                        yield Label(LIMIT_NAMES[name].capitalize())
                        yield Input(
                            limit_text(self.current, name), placeholder="unlimited", id=field_id
                        )

    def result(self) -> LimitsEdit:
        typed = {name: self.field(f"#{fid}") for name, fid in self.FIELD_IDS.items()}
        limits, clear = limits_change(self.scope, self.current, typed)
        changed = [n for n in LIMIT_NAMES if getattr(limits, n) is not None]
        if not changed and not clear:
            raise UsageError("nothing changed", hint="edit a field, or Esc to leave")
        return LimitsEdit(limits, clear)


class SecretShown(ModalScreen[None]):
    """A key's secret, shown this once; c copies it, Enter or Escape closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "copy", "Copy"),
        Binding("escape,enter", "dismiss", "Close"),
    ]

    def __init__(self, key: KeyView) -> None:
        super().__init__()
        self.key = key
        self.secret = key.secret

    def compose(self) -> ComposeResult:
        with Vertical(id="secret-box", classes="dialog"):
            yield Static(secret_text(self.key), id="secret-text")
            yield Static(
                "This is the only time the secret is shown: gatewayd keeps only its hash. "
                "Press c to copy it (terminals with OSC 52), or select it with the mouse "
                "(shift+drag in most terminals).",
                id="secret-warning",
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Copy", id="secret-copy")
                yield Button("I have saved it", variant="primary", id="secret-close")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#secret-box").border_title = "Shown once"
        self.query_one("#secret-close", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "secret-copy":
            self.action_copy()
        else:
            self.dismiss(None)

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.secret)
        self.notify("Copied the secret to the clipboard (where the terminal allows it).")


__all__ = [
    "KeyDialog",
    "LevelDialog",
    "LimitsDialog",
    "LimitsEdit",
    "NewKey",
    "NewLevel",
    "RenameDialog",
    "RotateDialog",
    "SecretShown",
]
