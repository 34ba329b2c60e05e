"""The node console: ``sudo llmgw`` on a node (``llmgw console node`` anywhere).

It needs neither the control plane nor an admin token: it reads the agent's
local status socket and NVML on this machine, knocks on the control planes
agent.yaml names, shows agent.yaml, and restarts the agent when asked (after
asking back). Overview (o) and agent.yaml (y) are Textual modes, like the
cluster console's screens.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Static

from llmgw.errors import LlmgwError
from llmgw.paths import Paths
from tui.node.agent_yaml import AgentYamlScreen
from tui.node.gpus import GpuReader, NvmlGpuReader
from tui.node.overview import REFRESH_S, OverviewScreen
from tui.node.probe import NodeProbe
from tui.node.service import AgentService, SystemdService
from tui.screens.common import describe


class ConfirmRestart(ModalScreen[bool]):
    """Asks before restarting the agent; y or the button restarts, n or Escape does not."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Restart"),
        Binding("n,escape", "answer(False)", "Cancel"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="restart-box", classes="dialog"):
            yield Static(
                "Restart this node's agent?\n\n"
                "Engines keep running: the agent takes them back when it is up again. "
                "The cluster sees the node reconnect within seconds.",
                id="restart-text",
            )
            with Horizontal(id="restart-buttons"):
                yield Button("Restart (y)", variant="error", id="restart-yes")
                yield Button("Cancel (n)", id="restart-no")

    def on_mount(self) -> None:
        self.query_one("#restart-box").border_title = "Restart the agent"
        self.query_one("#restart-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "restart-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class AgentRestarted(Message):
    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words


class RestartFailed(Message):
    def __init__(self, error: LlmgwError) -> None:
        super().__init__()
        self.error = error


class NodeConsole(App[None]):
    """The node console for the machine ``paths`` describe.

    ``gpus`` reads the GPUs (NVML by default; tests give a recorded
    inventory), ``service`` restarts the agent (systemd's ``llmgw-agent``
    by default), ``status_socket`` is where the agent answers (the run
    dir's by default).
    """

    TITLE = "llmgw node"
    CSS_PATH = "node.tcss"
    DEFAULT_MODE = "overview"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("o", "switch_mode('overview')", "Overview"),
        Binding("y", "switch_mode('agent-yaml')", "agent.yaml"),
        Binding("r", "refresh", "Refresh"),
        Binding("R", "restart_agent", "Restart agent"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        paths: Paths,
        *,
        gpus: GpuReader | None = None,
        service: AgentService | None = None,
        status_socket: Path | None = None,
        refresh_s: float = REFRESH_S,
    ) -> None:
        super().__init__()
        self.paths = paths
        self.sub_title = platform.node()
        self.probe = NodeProbe(
            status_socket or paths.agent_status_socket, paths.agent_yaml, gpus or NvmlGpuReader()
        )
        self.service = service or SystemdService()
        self._refresh_s = refresh_s
        self.add_mode("overview", self.get_default_screen)
        self.add_mode("agent-yaml", lambda: AgentYamlScreen(paths.agent_yaml))

    def get_default_screen(self) -> Screen:
        return OverviewScreen(self.probe, refresh_s=self._refresh_s)

    def action_refresh(self) -> None:
        reload = getattr(self.screen, "reload", None)
        if callable(reload):
            reload()

    def action_restart_agent(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.notify("Restarting the agent…", timeout=5)
                self.restart_agent()

        self.push_screen(ConfirmRestart(), answered)

    @work(exclusive=True, exit_on_error=False, group="restart")
    async def restart_agent(self) -> None:
        try:
            words = await self.service.restart()
        except LlmgwError as e:
            self.post_message(RestartFailed(e))
            return
        self.post_message(AgentRestarted(words))

    def on_agent_restarted(self, message: AgentRestarted) -> None:
        self.notify(message.words, title="Agent restarted", timeout=10)
        self.action_refresh()

    def on_restart_failed(self, message: RestartFailed) -> None:
        self.notify(
            describe(message.error),
            title="The agent was not restarted",
            severity="error",
            timeout=20,
        )


def run_node_console(paths: Paths) -> None:
    """Open the node console for this machine; it never needs the control plane."""
    NodeConsole(paths).run()
