"""The serve dialog: what ``llmgw ctl model plan`` and ``llmgw ctl model serve`` do, in one form.

Plan asks gatewayd what the model needs (``plan_model``: every layout, its
per-card memory and speed, or why none fits); Serve builds the spec as the
command does (``llmgw.present.modelfmt.serve_spec``) and adds it with
``put_model(create_only=True)``, which refuses a name already in the catalog.
A refusal stays in the dialog, in gatewayd's words, with the fields as typed.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, DataTable, Input, Label, Select, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.catalog.model import ENGINES
from llmgw.errors import LlmgwError, UsageError
from llmgw.present.modelfmt import (
    PLAN_COLUMNS,
    layout_cells,
    name_from_source,
    plan_head,
    serve_spec,
)
from proto.llmgw.v1 import ModelSpec, ModelView, PlanModelRequest, PlanReply
from tui.screens.common import Refused, describe, show_worker_error
from tui.screens.shell import KeyFooter

SOURCE_HINT = "/models/x.gguf · file:///… · https://…/x.gguf · hf:org/repo[@rev]:file"


class Planned(Message):
    """gatewayd's plan for the typed source arrived (``plan_model``)."""

    def __init__(self, reply: PlanReply) -> None:
        super().__init__()
        self.reply = reply


class Served(Message):
    """The model was added to the catalog (``put_model``); its replicas start now."""

    def __init__(self, view: ModelView) -> None:
        super().__init__()
        self.view = view


class ServeRefused(Refused):
    """Planning or serving was refused, or gatewayd could not be asked."""


def whole_number(text: str, field: str, *, default: int) -> int:
    """An integer field's value; empty means ``default``."""
    text = text.strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{field}: {text!r} is not a whole number") from None


class ServeDialog(ModalScreen[ModelView | None]):
    """Plan and serve a model; dismissed with the new model's view, or None on Escape."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client

    def compose(self) -> ComposeResult:
        with Vertical(id="serve-box", classes="dialog"):
            yield Label("Source")
            yield Input(placeholder=SOURCE_HINT, id="serve-source")
            yield Label("Name")
            yield Input(placeholder="(from the file name)", id="serve-name")
            with Horizontal(id="serve-options"):
                with Vertical():
                    yield Label("Engine")
                    yield Select(
                        [(e, e) for e in ENGINES],
                        value="llama.cpp",
                        allow_blank=False,
                        id="serve-engine",
                    )
                with Vertical():
                    yield Label("Replicas")
                    yield Input("1", type="integer", id="serve-replicas")
                with Vertical():
                    yield Label("Context (0: planned)")
                    yield Input("0", type="integer", id="serve-context")
                yield Checkbox("CPU only", id="serve-cpu")
            yield Static(id="serve-plan")
            layouts: DataTable = DataTable(id="serve-layouts", cursor_type="row")
            for heading in PLAN_COLUMNS:
                layouts.add_column(heading, key=heading.lower())
            yield layouts
            yield Static(
                "Plan: what it needs on this cluster · Serve: add it and start its replicas",
                id="serve-status",
                classes="dialog-status",
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Plan", id="serve-plan-button")
                yield Button("Serve", variant="primary", id="serve-button")
                yield Button("Cancel", id="serve-cancel")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#serve-box").border_title = "Serve a model"
        self.query_one("#serve-plan").display = False
        self.query_one("#serve-layouts").display = False

    # -- the form ----------------------------------------------------------------

    def _field(self, selector: str) -> str:
        return self.query_one(selector, Input).value.strip()

    def _engine(self) -> str:
        return str(self.query_one("#serve-engine", Select).value)

    def _context_tokens(self) -> int:
        return whole_number(self._field("#serve-context"), "context", default=0)

    def build_spec(self) -> ModelSpec:
        """The spec ``llmgw ctl model serve`` would send for these fields; UsageError if wrong."""
        return serve_spec(
            self._field("#serve-source"),
            name=self._field("#serve-name"),
            engine=self._engine(),
            replicas=whole_number(self._field("#serve-replicas"), "replicas", default=1),
            context=self._context_tokens(),
            cpu=self.query_one("#serve-cpu", Checkbox).value,
        )

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "serve-source":
            return
        # Show the name the command would pick, so an empty Name is no surprise.
        try:
            placeholder = f"{name_from_source(event.value)} (from the file name)"
        except ValueError:
            placeholder = "(from the file name)"
        self.query_one("#serve-name", Input).placeholder = placeholder

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "serve-plan-button":
            self.action_plan()
        elif event.button.id == "serve-button":
            self.action_serve()
        elif event.button.id == "serve-cancel":
            self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_serve()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_plan(self) -> None:
        source = self._field("#serve-source")
        try:
            if not source:
                raise UsageError("give a source to plan")
            request = PlanModelRequest(
                source=source, engine=self._engine(), context_length=self._context_tokens()
            )
        except UsageError as e:
            self._say(describe(e), error=True)
            return
        self._say(f"Planning {source} …")
        self.plan(request)

    def action_serve(self) -> None:
        try:
            spec = self.build_spec()
        except UsageError as e:
            self._say(describe(e), error=True)
            return
        self._say(f"Serving {spec.name} …")
        self.serve(spec)

    # -- workers: the only code here that talks to gatewayd --------------------

    @work(exclusive=True, exit_on_error=False, group="serve-plan")
    async def plan(self, request: PlanModelRequest) -> None:
        try:
            reply = await self._client.plan_model(request)
        except LlmgwError as e:
            self.post_message(ServeRefused(e))
            return
        self.post_message(Planned(reply))

    @work(exclusive=True, exit_on_error=False, group="serve-put")
    async def serve(self, spec: ModelSpec) -> None:
        try:
            view = await self._client.put_model(spec, create_only=True)
        except LlmgwError as e:
            self.post_message(ServeRefused(e))
            return
        self.post_message(Served(view))

    # -- message handlers: widgets only ----------------------------------------

    def on_planned(self, message: Planned) -> None:
        reply = message.reply
        parts: list[Text] = [plan_head(reply)]
        if reply.refused:
            parts.append(Text(f"refused: {reply.refused}", style="red"))
        parts += [Text(note, style="dim") for note in reply.notes]
        summary = self.query_one("#serve-plan", Static)
        summary.update(Group(*parts))
        summary.display = True
        layouts = self.query_one("#serve-layouts", DataTable)
        layouts.clear()
        for layout in reply.layouts:
            layouts.add_row(*layout_cells(layout))
        layouts.display = bool(reply.layouts)
        n = len(reply.layouts)
        self._say(
            f"{n} layout{'s' if n != 1 else ''} fit{'s' if n == 1 else ''}, best first"
            if n
            else "No layout fits this cluster",
            error=not n,
        )

    def on_served(self, message: Served) -> None:
        self.dismiss(message.view)

    def on_serve_refused(self, message: ServeRefused) -> None:
        self._say(describe(message.error), error=True)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#serve-status", Static), event)

    def _say(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#serve-status", Static)
        status.update(text)
        status.set_class(error, "-error")
