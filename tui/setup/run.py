"""The run page: each step of the plan with its progress, then what to do next.

A worker drives ``llmgw.setup.run.PlanRun`` and posts each step's progress
as a past-tense message; the page only draws. It ends with what to do next
and, once the cluster runs, ``c`` opens the cluster console (the app's
result is then True). A failed step says why and what to do; nothing after
it is run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Static
from textual.worker import Worker, WorkerState

from llmgw.errors import LlmgwError
from llmgw.setup.plan import SetupPlan, shell_text, steps
from llmgw.setup.run import PlanRun, StepUpdate
from llmgw.setup.words import what_next
from tui.screens.common import show_worker_error

if TYPE_CHECKING:
    from tui.setup.app import SetupConsole

ICONS = {"pending": "·", "running": "…", "done": "✓", "failed": "✗", "skipped": "-"}
STYLES = {"pending": "dim", "running": "bold", "done": "green", "failed": "red", "skipped": "dim"}


class StepChanged(Message):
    """A step of the run began, moved on or ended."""

    def __init__(self, update: StepUpdate) -> None:
        super().__init__()
        self.update = update


class RunEnded(Message):
    """The run is over: every step went well (``ok``) or one failed."""

    def __init__(self, ok: bool, started: bool, up_pid: int | None = None) -> None:
        super().__init__()
        self.ok = ok
        self.started = started
        self.up_pid = up_pid


class RunScreen(Screen[None]):
    """The steps of one run of ``plan``, live."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "open_console", "Open the cluster console"),
        Binding("b", "back", "Back to the parts"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, plan: SetupPlan) -> None:
        super().__init__()
        self.plan = plan
        self.state: dict[str, str] = {}
        self.details: dict[str, StepUpdate] = {}
        self.ended: RunEnded | None = None

    @property
    def console(self) -> SetupConsole:
        return cast("SetupConsole", self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="run-body"):
            yield Static(id="run-command")
            yield Static(id="run-steps")
            yield Static(id="run-next")
        with Horizontal(id="run-buttons"):
            yield Button("Back", id="run-back", disabled=True)
            yield Button("Open the cluster console", variant="primary", id="run-open")
            yield Button("Quit", id="run-quit")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#run-command").border_title = "Running"
        self.query_one("#run-command", Static).update(
            shell_text(self.plan, home=self.console.home_shown)
        )
        self.query_one("#run-open", Button).display = False
        self.steps = steps(self.plan, start=self._starts)
        self.state = {s.key: "pending" for s in self.steps}
        self.show()
        self.run_plan()

    @property
    def _starts(self) -> bool:
        return self.console.start and self.console.paths.home is not None

    @work(exclusive=True, exit_on_error=False, group="setup-run")
    async def run_plan(self) -> None:
        fixed = self.console.fixed_machine
        run = PlanRun(
            self.plan,
            self.console.paths,
            start=self.console.start,
            machine=(lambda: fixed) if fixed is not None else None,
        )
        try:
            async for update in run.updates():
                self.post_message(StepChanged(update))
        except LlmgwError as e:  # a step's own errors are its failure; this is anything else
            self.post_message(StepChanged(StepUpdate(key="", state="failed", detail=e.message)))
        self.post_message(RunEnded(run.ok, run.start, run.up_pid))

    def on_step_changed(self, message: StepChanged) -> None:
        u = message.update
        if u.key in self.state:
            self.state[u.key] = u.state
            if u.detail or u.state != "running":
                self.details[u.key] = u
        self.show()

    def on_run_ended(self, message: RunEnded) -> None:
        self.ended = message
        if not message.ok:
            for key, state in self.state.items():
                if state == "pending":
                    self.state[key] = "skipped"
        self.show()
        back, open_ = self.query_one("#run-back", Button), self.query_one("#run-open", Button)
        back.disabled = message.ok
        back.display = not message.ok
        open_.display = message.ok and message.started
        if open_.display:
            open_.focus()
        else:
            back.focus()
        self.refresh_bindings()

    def show(self) -> None:
        text = Text()
        for step in self.steps:
            state = self.state.get(step.key, "pending")
            text.append(f"{ICONS[state]} {step.title}\n", style=STYLES[state])
            u = self.details.get(step.key)
            if u is not None and u.detail:
                text.append(f"    {u.detail}\n", style="red" if state == "failed" else "dim")
            if u is not None and u.hint:
                text.append(f"    {u.hint}\n", style="yellow")
        text.rstrip()
        self.query_one("#run-steps", Static).update(text)
        self.query_one("#run-next", Static).update(self._next())
        # The step under way, and at the end what to do next, stay in sight.
        self.query_one("#run-body", VerticalScroll).scroll_end(animate=False)

    def _next(self) -> Text:
        ended = self.ended
        text = Text()
        if ended is None:
            return text
        if not ended.ok:
            text.append("The run stopped at the step marked ✗. ", style="bold red")
            text.append("What it wrote stays and is kept by a second run: change the plan (b) ")
            text.append("and run it again.")
            return text
        title = "The cluster runs." if ended.started else "This machine is set up."
        text.append(f"{title} What next:\n", style="bold green")
        home = self.console.home_shown
        for line in what_next(self.plan, started=ended.started, home=home, up_pid=ended.up_pid):
            text.append(f"  {line}\n")
        if ended.started:
            text.append("c opens the cluster console.", style="bold")
        text.rstrip()
        return text

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        ended = self.ended
        if action == "open_console":
            return ended is not None and ended.ok and ended.started
        if action == "back":
            return ended is not None and not ended.ok
        return True

    def action_open_console(self) -> None:
        if self.ended is not None and self.ended.ok and self.ended.started:
            self.app.exit(True)

    def action_back(self) -> None:
        if self.ended is not None and not self.ended.ok:
            self.dismiss()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run-open":
            self.action_open_console()
        elif event.button.id == "run-back":
            self.action_back()
        elif event.button.id == "run-quit":
            self.app.exit(False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#run-next", Static), event)
        if event.state is WorkerState.ERROR and self.ended is None:
            self.ended = RunEnded(ok=False, started=False)
            self.on_run_ended(self.ended)
