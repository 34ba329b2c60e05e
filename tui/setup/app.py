"""The setup console: bare ``llmgw`` on a machine with nothing installed opens it.

Three screens over one ``SetupPlan`` the app holds: the parts of the install
(``parts.py``: Space turns one on or off, Enter opens its settings), the plan
(``plan.py``: what is in and out, the same install as an ``llmgw server init``
command, and what would stop it here), and the run (``run.py``: each step's
progress, then what to do next). The app's result is True when the operator
asks for the cluster console once the cluster runs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.worker import Worker, WorkerState

from llmgw.paths import Paths, user_home
from llmgw.setup.plan import Machine, SetupPlan, default_plan
from llmgw.setup.run import choose_ports, this_machine
from tui.setup.parts import PartsScreen

log = logging.getLogger(__name__)


class MachineRead(Message):
    """This machine's facts were read (``this_machine``), with the ports a plan would use."""

    def __init__(self, machine: Machine, ports: dict[str, int]) -> None:
        super().__init__()
        self.machine = machine
        self.ports = ports


class SetupConsole(App[bool]):
    """The setup screens over one plan.

    ``machine`` and ``plan`` replace what the app would read of this machine
    (tests: a machine too small for the starter). ``start``: whether a run
    starts the cluster (``llmgw up`` in the background) or ends once the
    files are written.
    """

    TITLE = "llmgw setup"
    CSS_PATH: ClassVar = ["../styles.tcss", "setup.tcss"]
    BINDINGS: ClassVar[list[BindingType]] = [Binding("ctrl+q", "quit", "Quit", show=False)]

    def __init__(
        self,
        paths: Paths,
        *,
        machine: Machine | None = None,
        plan: SetupPlan | None = None,
        start: bool = True,
    ) -> None:
        super().__init__()
        self.paths = paths
        self.start = start
        self.machine: Machine | None = machine
        self.fixed_machine = machine
        self.plan: SetupPlan | None = plan
        if machine is not None and plan is None:
            self.plan = default_plan(machine)

    @property
    def home_shown(self) -> str:
        """LLMGW_HOME as commands must say it, or "" for the usual place."""
        home = self.paths.home
        if home is None or home == user_home().expanduser().resolve():
            return ""
        return str(home)

    def on_mount(self) -> None:
        self.push_screen(PartsScreen())
        if self.plan is None:
            self.read_machine()

    @work(exclusive=True, exit_on_error=False, group="machine")
    async def read_machine(self) -> None:
        ports = await asyncio.to_thread(choose_ports)
        machine = await asyncio.to_thread(this_machine, self.paths, ports=tuple(ports.values()))
        self.post_message(MachineRead(machine, ports))

    def on_machine_read(self, message: MachineRead) -> None:
        self.machine = message.machine
        if self.plan is None:
            self.plan = default_plan(message.machine, message.ports)
        screen = self.screen
        if isinstance(screen, PartsScreen):
            screen.show_plan()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "machine" and event.state is WorkerState.ERROR:
            log.error("reading this machine failed", exc_info=event.worker.error)
            screen = self.screen
            if isinstance(screen, PartsScreen):
                screen.show_error(f"this machine could not be read: {event.worker.error!r}")

    def set_plan(self, plan: SetupPlan) -> None:
        self.plan = plan


def run_setup(paths: Paths) -> bool:
    """Open the setup screens for ``paths``; True when the cluster console should open next."""
    app = SetupConsole(paths)
    app.run()
    return app.return_value is True
