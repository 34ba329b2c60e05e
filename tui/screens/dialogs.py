"""The dialogs every screen shares: a form with OK and Cancel, and a question before an action.

A screen's own forms subclass ``FormDialog`` (fields in, a value out, a
mistake kept in the form in the command's words); ``Confirm`` asks before
something that cannot be undone, the safe answer focused.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from llmgw.errors import UsageError
from tui.screens.common import describe
from tui.screens.shell import KeyFooter

T = TypeVar("T")


class FormDialog(ModalScreen[T | None]):
    """A box of fields with OK and Cancel; Enter in a field is OK, Escape cancels.

    Subclasses compose their fields in ``fields`` and turn them into the
    dismissal value in ``result``, raising UsageError for what cannot be sent.
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    OK_LABEL = "OK"
    HELP = "Enter confirms · Esc cancels"

    def __init__(self, title: str) -> None:
        super().__init__()
        self.form_title = title

    def compose(self) -> ComposeResult:
        with Vertical(id="form-box", classes="dialog form"):
            yield from self.fields()
            yield Static(self.HELP, id="form-status", classes="dialog-status")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.OK_LABEL, variant="primary", id="form-ok")
                yield Button("Cancel", id="form-cancel")
        yield KeyFooter()

    def fields(self) -> ComposeResult:
        yield from ()

    def result(self) -> T | None:
        raise NotImplementedError

    def on_mount(self) -> None:
        self.query_one("#form-box").border_title = self.form_title

    def field(self, selector: str) -> str:
        return self.query_one(selector, Input).value.strip()

    def say(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#form-status", Static)
        status.update(text)
        status.set_class(error, "-error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "form-ok":
            self.action_submit()
        elif event.button.id == "form-cancel":
            self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    def action_submit(self) -> None:
        try:
            value = self.result()
        except UsageError as e:
            self.say(describe(e), error=True)
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Confirm(ModalScreen[bool]):
    """Asks before something that cannot be undone; y or the button confirms."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "confirm", "Yes"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, title: str, question: str, yes: str) -> None:
        super().__init__()
        self._title, self._question, self._yes = title, question, yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Static(self._question)
            with Horizontal(classes="dialog-buttons"):
                yield Button(self._yes, variant="error", id="confirm-yes")
                yield Button("Cancel", id="confirm-no")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#confirm-box").border_title = self._title
        # The safe answer has the focus: Enter alone changes nothing.
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


__all__ = ["Confirm", "FormDialog"]
