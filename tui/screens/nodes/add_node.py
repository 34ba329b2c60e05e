"""The Add node dialog: ``llmgw node add HOST`` as a form, with each step's progress live.

The form takes what the command's flags take (host, SSH user, port and key,
the node's id, the control plane addresses it dials, an install root, a
wheelhouse, a known_hosts file, and whether to accept a new host key) and
builds the same ``AddPlan``; Add runs the same onboarding (``llmgw.onboard.
add_node``) in a worker, which posts each ``StepEvent`` as it comes. The
dialog shows every event in the command's own words (``llmgw.onboard.words``),
the fix under a warning or a failure, the step it is at out of six, and at
the end what onboarding did: the node ready with its facts and the next
step, or the failure with its fix, the form as typed to change and try again.

Onboarding issues the node's certificate from the cluster's CA, so it runs
where the control plane's files are: a console given only an admin client
(``paths`` None) says so and adds nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, ProgressBar, Static
from textual.worker import Worker, WorkerState

from llmgw.errors import LlmgwError, UsageError
from llmgw.onboard import AddPlan, SshTarget, StepEvent, add_node
from llmgw.onboard.flow import control_planes_for
from llmgw.onboard.words import ADD_STEPS, event_lines, event_rows, step_number
from llmgw.paths import ENV_HOME, Paths
from tui.screens.common import describe, show_worker_error
from tui.screens.models.serve import whole_number
from tui.screens.shell import KeyFooter

NEEDS_CONTROL_PLANE = (
    "Adding a node issues its certificate from the cluster's CA, so it runs where the "
    "control plane's files are, and this console was not given them. Open the console on "
    f"the control plane (sudo llmgw, or {ENV_HOME}=DIR llmgw for a cluster kept in DIR), "
    "or run llmgw node add HOST there."
)
HELP = "Add: check the machine, install llmgw and its agent, join it · Esc cancels"


def steps_table(events: list[StepEvent]) -> Table:
    """The events' lines as the command prints them, long ones wrapped under their words."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    for ev in events:
        for head, words in event_rows(ev):
            grid.add_row(head, words)
    return grid


class StepReported(Message):
    """Onboarding reported one step's progress (a ``StepEvent``; the last one is the result)."""

    def __init__(self, event: StepEvent) -> None:
        super().__init__()
        self.event = event


class AddNodeDialog(ModalScreen[str | None]):
    """``llmgw node add`` as a form; dismissed with the new node's id once it joined, else None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, paths: Paths | None) -> None:
        super().__init__()
        self._paths = paths
        # Every event of the last run, in order (what the command's --json prints).
        self.events: list[StepEvent] = []
        self._facts = ""
        self.node_id: str | None = None
        self._onboarding = False

    def compose(self) -> ComposeResult:
        with Vertical(id="add-box", classes="dialog"):
            with Vertical(id="add-form"):
                with Horizontal(classes="form-row"):
                    with Vertical(id="add-host-col"):
                        yield Label("Host")
                        yield Input(placeholder="a name or address SSH reaches", id="add-host")
                    with Vertical():
                        yield Label("User")
                        yield Input(placeholder="(~/.ssh/config, else yours)", id="add-user")
                    with Vertical(id="add-port-col"):
                        yield Label("Port")
                        yield Input(
                            placeholder="(~/.ssh/config, else 22)", type="integer", id="add-port"
                        )
                with Horizontal(classes="form-row"):
                    with Vertical():
                        yield Label("Identity file")
                        yield Input(placeholder="(your SSH keys and agent)", id="add-identity")
                    with Vertical():
                        yield Label("Node id")
                        yield Input(placeholder="(the node's hostname)", id="add-node-id")
                yield Label("Control plane addresses (HOST:PORT, comma separated)")
                yield Input(id="add-planes")
                with Horizontal(classes="form-row"):
                    with Vertical():
                        yield Label("Install root (advanced)")
                        yield Input(placeholder="(/opt, /etc, /var)", id="add-root")
                    with Vertical():
                        yield Label("Wheelhouse")
                        yield Input(placeholder="(PyPI)", id="add-wheelhouse")
                    with Vertical():
                        yield Label("known_hosts")
                        yield Input(placeholder="(~/.ssh/known_hosts)", id="add-known-hosts")
                yield Checkbox("Accept a new host key (first contact)", id="add-accept-key")
            with Horizontal(id="add-progress"):
                yield ProgressBar(total=len(ADD_STEPS), show_eta=False, id="add-bar")
                yield Static(id="add-step")
            with VerticalScroll(id="add-steps"):
                yield Static(id="add-log")
            yield Static(id="add-result")
            yield Static(HELP, id="add-status", classes="dialog-status")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Add", variant="primary", id="add-button")
                yield Button("Cancel", id="add-cancel")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#add-box").border_title = "Add a node"
        for part in ("#add-progress", "#add-steps", "#add-result"):
            self.query_one(part).display = False
        if self._paths is None:
            self.query_one("#add-form").display = False
            self.query_one("#add-button", Button).disabled = True
            self._say(NEEDS_CONTROL_PLANE, error=True)
            return
        # The command's default, shown as it would pick it (server.yaml and the server
        # certificate of this control plane), or why it cannot.
        try:
            planes = ", ".join(control_planes_for(AddPlan(SshTarget(""), self._paths)))
        except LlmgwError as e:
            planes = f"(none known: {e.message})"
        self.query_one("#add-planes", Input).placeholder = planes
        self.query_one("#add-host", Input).focus()

    # -- the form ----------------------------------------------------------------

    def _field(self, selector: str) -> str:
        return self.query_one(selector, Input).value.strip()

    def build_plan(self) -> AddPlan:
        """The plan ``llmgw node add`` makes of the same flags; UsageError if one is wrong."""
        if self._paths is None:
            raise UsageError(NEEDS_CONTROL_PLANE)
        host = self._field("#add-host")
        if not host:
            raise UsageError("give the host: a name or address SSH reaches")
        port = whole_number(self._field("#add-port"), "port", default=0)
        if not 0 <= port <= 65535:
            raise UsageError(f"port: {port} is not between 0 and 65535")
        wheelhouse = self._field("#add-wheelhouse")
        if wheelhouse and not Path(wheelhouse).is_dir():
            raise UsageError(f"wheelhouse: {wheelhouse} is not a folder")
        planes = self._field("#add-planes")
        return AddPlan(
            target=SshTarget(
                host=host,
                port=port,
                user=self._field("#add-user"),
                identity=self._field("#add-identity"),
                known_hosts=self._field("#add-known-hosts"),
                accept_new_host_key=self.query_one("#add-accept-key", Checkbox).value,
            ),
            paths=self._paths,
            node_id=self._field("#add-node-id"),
            control_planes=[p.strip() for p in planes.split(",") if p.strip()],
            install_root=self._field("#add-root"),
            wheelhouse=wheelhouse,
        )

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "add-button":
            self.action_add()
        elif event.button.id == "add-cancel":
            self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_add()

    def action_cancel(self) -> None:
        # A run cut short stops where it is; node add again repairs what is missing.
        self.workers.cancel_group(self, "add-node")
        self.dismiss(self.node_id)

    def action_add(self) -> None:
        if self._paths is None or self._onboarding or self.node_id is not None:
            return
        form = self.query_one("#add-form")
        if not form.display:
            # After a failure: the form as typed again, to change what the fix says.
            self._show_form(True)
            self._say(HELP)
            return
        try:
            plan = self.build_plan()
        except UsageError as e:
            self._say(describe(e), error=True)
            return
        self.show_started(plan.target.where())
        self.onboard(plan)

    def show_started(self, where: str) -> None:
        """The form gives way to the steps of a new run on ``where`` (user@host:port)."""
        self.events.clear()
        self._facts = ""
        self._onboarding = True
        self._show_form(False)
        self.query_one("#add-bar", ProgressBar).update(progress=0)
        self.query_one("#add-step", Static).update("")
        self.query_one("#add-log", Static).update("")
        self.query_one("#add-button", Button).disabled = True
        self._say(f"Adding {where} … (Esc stops it)")

    def _show_form(self, shown: bool) -> None:
        self.query_one("#add-form").display = shown
        # Running, the box takes the height it may: the steps scroll, the result stays.
        self.query_one("#add-box").set_class(not shown, "-running")
        for part in ("#add-progress", "#add-steps", "#add-result"):
            self.query_one(part).display = not shown
        if shown:
            self.query_one("#add-button", Button).label = "Add"
            self.query_one("#add-host", Input).focus()

    # -- the worker: the only code here that runs onboarding -----------------------

    @work(exclusive=True, exit_on_error=False, group="add-node")
    async def onboard(self, plan: AddPlan) -> None:
        # add_node turns every LlmgwError into a fail event and the result: none ends here.
        async for event in add_node(plan):
            self.post_message(StepReported(event))

    # -- message handlers: widgets only ----------------------------------------

    def on_step_reported(self, message: StepReported) -> None:
        self.show_event(message.event)

    def show_event(self, ev: StepEvent) -> None:
        """One event drawn: its line (and fix) in the log, the step counter, the result."""
        self.events.append(ev)
        if ev.step == "result":
            self._show_result(ev)
            return
        number = step_number(ev.step)
        if number:
            bar = self.query_one("#add-bar", ProgressBar)
            done = number if ev.status in ("ok", "kept") and not ev.item else number - 1
            bar.update(progress=max(done, bar.progress))
            self.query_one("#add-step", Static).update(
                f"step {number} of {len(ADD_STEPS)}: {ev.step}"
            )
        if ev.step == "register" and ev.status == "ok":
            self._facts = ev.detail
        steps = [e for e in self.events if e.step != "result"]
        self.query_one("#add-log", Static).update(steps_table(steps))
        self.query_one("#add-steps", VerticalScroll).scroll_end(animate=False)

    def _show_result(self, ev: StepEvent) -> None:
        self._onboarding = False
        ok = ev.status == "ok"
        result = ev.result or {}
        parts: list[Text] = list(event_lines(ev))
        if ok:
            self.node_id = str(result.get("node_id") or "") or None
            self.query_one("#add-bar", ProgressBar).update(progress=len(ADD_STEPS))
            self.query_one("#add-step", Static).update("done")
            if self._facts:
                parts.insert(1, Text(self._facts))
            n = len(result.get("warnings") or [])
            if n:
                parts.insert(-1, Text(f"{n} warning{'s' if n != 1 else ''} above", style="yellow"))
            self.query_one("#add-button").display = False
            self.query_one("#add-cancel", Button).label = "Close"
            self.query_one("#add-cancel", Button).focus()
            self._say("Close: the Nodes screen shows it")
        else:
            button = self.query_one("#add-button", Button)
            button.disabled = False
            button.label = "Try again"
            self._say(
                "Do what the fix says, then Try again: the form as typed (steps done are kept)",
                error=True,
            )
        box = self.query_one("#add-result", Static)
        box.update(Group(*parts))
        box.set_class(not ok, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#add-status", Static), event)
        if event.state is WorkerState.ERROR:
            self._onboarding = False
            self.query_one("#add-button", Button).disabled = False

    def _say(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#add-status", Static)
        status.update(text)
        status.set_class(error, "-error")
