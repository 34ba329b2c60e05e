"""The plan page: what is in and out, the same install as a command, and what would stop it.

The command is ``llmgw.setup.plan.to_command``'s, shown as a person would
type it. What would make the install fail here (``check``) is listed with
the flags that leave its cause out, and Run stays disabled while there is
any, or while this machine and a PostgreSQL store are still being checked.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, ClassVar, cast

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Static
from textual.worker import Worker

from llmgw.setup.plan import Machine, Refusal, StoreCheck, check, notes, plan_ports, shell_text
from llmgw.setup.run import check_postgres, this_machine
from llmgw.setup.words import in_and_out
from tui.screens.common import show_worker_error

if TYPE_CHECKING:
    from tui.setup.app import SetupConsole


class PlanChecked(Message):
    """This machine was read again and, for PostgreSQL, the store was connected to."""

    def __init__(self, machine: Machine, store: StoreCheck | None) -> None:
        super().__init__()
        self.machine = machine
        self.store = store


class PlanScreen(Screen[None]):
    """The plan of the app's parts; Run opens the run page."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,b", "back", "Back to the parts"),
        Binding("r", "run", "Run"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.refusals: list[Refusal] = []
        self.checked = False
        self.store: StoreCheck | None = None

    @property
    def console(self) -> SetupConsole:
        return cast("SetupConsole", self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="plan-body"):
            yield Static(id="plan-in", classes="plan-list")
            yield Static(id="plan-out", classes="plan-list")
            yield Static(id="plan-command")
            yield Static("Checking this machine…", id="plan-checks")
        with Horizontal(id="plan-buttons"):
            yield Button("Back", id="plan-back")
            yield Button("Run", variant="primary", id="plan-run", disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#plan-command").border_title = "The same install as a command"
        self.show()
        self.check_plan()

    @work(exclusive=True, exit_on_error=False, group="plan-check")
    async def check_plan(self) -> None:
        plan = self.console.plan
        if plan is None:
            return
        machine = self.console.fixed_machine
        if machine is None:
            ports = plan_ports(plan)
            machine = await asyncio.to_thread(this_machine, self.console.paths, ports=ports)
        store = None
        if plan.store.kind == "postgres" and plan.store.dsn:
            store = await check_postgres(plan.store.dsn)
        self.post_message(PlanChecked(machine, store))

    def on_plan_checked(self, message: PlanChecked) -> None:
        self.console.machine = message.machine
        self.store = message.store
        self.checked = True
        self.show()

    def show(self) -> None:
        plan = self.console.plan
        if plan is None:
            return
        ins, outs = in_and_out(plan)
        self.query_one("#plan-in", Static).update(_listing("In this install", ins))
        self.query_one("#plan-out", Static).update(_listing("Left out", outs or ["nothing"]))
        command = self.query_one("#plan-command", Static)
        if plan.control_plane.on:
            command.update(shell_text(plan, home=self.console.home_shown))
        else:
            command.update("No command: there is no control plane in this plan.")
        machine = self.console.machine
        checks = Text()
        self.refusals = []
        if machine is not None:
            self.refusals = check(plan, machine, store=self.store)
        if not self.checked:
            checks.append("Checking this machine", style="dim")
            if plan.store.kind == "postgres":
                checks.append(" and connecting to the store", style="dim")
            checks.append("…", style="dim")
        elif self.refusals:
            checks.append("Refused before anything is installed:\n", style="bold")
            for r in self.refusals:
                checks.append(f"✗ {r.text()}\n", style="red")
        else:
            checks.append("✓ The plan fits this machine.\n", style="green")
        if self.checked and self.store is not None and self.store.ok:
            checks.append(f"✓ {self.store.message}\n", style="green")
        if machine is not None:
            for note in notes(plan, machine):
                checks.append(f"! {note}\n", style="yellow")
        self.query_one("#plan-checks", Static).update(checks)
        self.query_one("#plan-run", Button).disabled = not self.can_run
        self.refresh_bindings()

    @property
    def can_run(self) -> bool:
        plan = self.console.plan
        return bool(plan and plan.control_plane.on and self.checked and not self.refusals)

    def action_back(self) -> None:
        self.dismiss()

    def action_run(self) -> None:
        if not self.can_run or self.console.plan is None:
            return
        from tui.setup.run import RunScreen

        self.app.switch_screen(RunScreen(self.console.plan))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "run":
            return True if self.can_run else None
        return True

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "plan-back":
            self.action_back()
        elif event.button.id == "plan-run":
            self.action_run()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#plan-checks", Static), event)


def _listing(title: str, lines: list[str]) -> Text:
    text = Text()
    text.append(f"{title}\n", style="bold")
    for line in lines:
        name, _, what = line.partition(": ")
        text.append(f"  {name}", style="bold")
        text.append(f": {what}\n" if what else "\n")
    text.rstrip()
    return text
