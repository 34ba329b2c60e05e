"""The parts of an installation as a list: Space turns one on or off, Enter opens its settings.

Each line says what the part does as set, or what is missing without it
(``llmgw.setup.plan.describe_part``); under the list, what the highlighted
part is for. ``p`` (or the Plan button) shows the plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, OptionList, Static
from textual.widgets.option_list import Option

from llmgw.setup.plan import PART_IDS, SetupPlan
from llmgw.setup.words import PART_HELP, PART_TITLES, describe_part
from tui.setup.dialogs import dialog_for

if TYPE_CHECKING:
    from tui.setup.app import SetupConsole


def part_prompt(plan: SetupPlan, part_id: str) -> Text:
    """``[x] Title`` and what the part does as set, on the line under it."""
    part = plan.part(part_id)
    on = part.on if part_id != "store" else True
    box = "[x]" if on else "[ ]"
    text = Text()
    text.append(f"{box} ", style="bold" if on else "dim")
    text.append(PART_TITLES[part_id], style="bold" if on else "")
    text.append(f"\n    {describe_part(plan, part_id)}", style="" if on else "dim")
    return text


class PartsScreen(Screen[None]):
    """The parts list; it edits the app's plan."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle", "Toggle"),
        Binding("enter", "settings", "Settings", show=True, priority=False),
        Binding("p", "plan", "Plan"),
        Binding("q", "app.quit", "Quit"),
    ]

    @property
    def console(self) -> SetupConsole:
        return cast("SetupConsole", self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Reading this machine…", id="setup-status")
        yield OptionList(id="parts")
        yield Static(id="part-help")
        with Horizontal(id="parts-buttons"):
            yield Button("Plan", variant="primary", id="to-plan", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self.show_plan()

    def show_plan(self) -> None:
        """Draw every part of the app's plan, keeping the highlighted one."""
        plan = self.console.plan
        parts = self.query_one("#parts", OptionList)
        if plan is None:
            parts.disabled = True
            self.query_one("#to-plan", Button).disabled = True
            return
        parts.disabled = False
        self.query_one("#to-plan", Button).disabled = False
        at = parts.highlighted
        if parts.option_count:
            for part_id in PART_IDS:
                parts.replace_option_prompt(part_id, part_prompt(plan, part_id))
        else:
            parts.add_options([Option(part_prompt(plan, p), id=p) for p in PART_IDS])
        parts.highlighted = at if at is not None else 0
        parts.focus()
        home = self.console.paths.home or self.console.paths.config_dir
        self.query_one("#setup-status", Static).update(
            f"Setting up llmgw in {home}. Space turns a part on or off, Enter opens its "
            "settings, p shows the plan."
        )
        self._show_help()

    def _highlighted(self) -> str | None:
        parts = self.query_one("#parts", OptionList)
        if self.console.plan is None or parts.highlighted is None:
            return None
        return parts.get_option_at_index(parts.highlighted).id

    def _show_help(self) -> None:
        part_id = self._highlighted()
        self.query_one("#part-help", Static).update(PART_HELP.get(part_id or "", ""))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_help()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        # Enter on the list, or a click on a part: its settings.
        event.stop()
        if event.option.id:
            self.open_settings(event.option.id)

    def action_toggle(self) -> None:
        part_id = self._highlighted()
        plan = self.console.plan
        if part_id is None or plan is None:
            return
        if part_id == "store":
            self.notify("The store is always there: Enter chooses SQLite or PostgreSQL.")
            return
        plan = plan.toggled(part_id)
        if part_id == "admin" and plan.admin.on and not plan.admin.group:
            from llmgw.setup.run import invoking_group

            plan = plan.with_part(
                "admin", plan.admin.model_copy(update={"group": invoking_group()})
            )
        self.console.set_plan(plan)
        self.show_plan()

    def action_settings(self) -> None:
        part_id = self._highlighted()
        if part_id is not None:
            self.open_settings(part_id)

    def open_settings(self, part_id: str) -> None:
        plan = self.console.plan
        if plan is None:
            return

        def done(part) -> None:
            if part is not None and self.console.plan is not None:
                self.console.set_plan(self.console.plan.with_part(part_id, part))
            self.show_plan()

        self.app.push_screen(dialog_for(part_id, plan, self.console.machine), done)

    def action_plan(self) -> None:
        if self.console.plan is None:
            return
        from tui.setup.plan import PlanScreen

        self.app.push_screen(PlanScreen())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "to-plan":
            self.action_plan()

    def show_error(self, text: str) -> None:
        status = self.query_one("#setup-status", Static)
        status.update(text)
        status.set_class(True, "-error")
