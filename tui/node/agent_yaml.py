"""The node console's agent.yaml page: the file as it is, read-only, secrets hidden.

agent.yaml holds addresses and paths, not secrets, but a hand-edited one may
carry a token or password: any key that names one has its value hidden.
Comments and order are kept (the file is redacted line by line, not parsed
and dumped again), and whether the agent would accept the file is said below it.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static
from textual.worker import Worker

from llmgw.config import load_agent_config
from llmgw.errors import LlmgwError
from tui.screens.common import describe, show_worker_error

HIDDEN = "•••••• (hidden)"
_SECRET_KEY = re.compile(
    r"^(?P<head>\s*-?\s*[\"']?(?P<key>[A-Za-z0-9_.-]*"
    r"(?:token|secret|password|passwd|api_key|apikey|dsn|credential)[A-Za-z0-9_.-]*)[\"']?\s*:\s*)"
    r"(?P<value>\S.*)$",
    re.IGNORECASE,
)
NO_AGENT_YAML_HINT = (
    "this machine is not set up as a node yet: add it from the control plane "
    "(llmgw node add HOST) or copy the bundle of llmgw node cert here"
)


def redact(text: str) -> str:
    """``text`` with the value of every key that names a secret replaced by HIDDEN."""
    out = []
    for line in text.splitlines():
        m = _SECRET_KEY.match(line)
        if m and not m.group("value").startswith("#"):
            line = m.group("head") + HIDDEN
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


class AgentYamlRead(Message):
    """agent.yaml was read: its redacted ``text``, and ``problem`` when the agent would refuse it."""

    def __init__(self, text: str | None, problem: LlmgwError | None) -> None:
        super().__init__()
        self.text = text
        self.problem = problem


def read_agent_yaml(path: Path) -> AgentYamlRead:
    """Blocking: the redacted file and, checked as the agent checks it, any problem."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return AgentYamlRead(
            None, LlmgwError(f"there is no agent.yaml at {path}", hint=NO_AGENT_YAML_HINT)
        )
    except OSError as e:
        return AgentYamlRead(
            None,
            LlmgwError(f"{path} cannot be read: {e.strerror}", hint="run the console as root"),
        )
    try:
        load_agent_config(path)
    except LlmgwError as e:
        return AgentYamlRead(redact(text), e)
    return AgentYamlRead(redact(text), None)


class AgentYamlScreen(Screen[None]):
    """agent.yaml, read again each time the page is shown or r is pressed."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"{self.path} · read-only · secrets hidden", id="status")
        with VerticalScroll(id="agent-yaml-page"):
            yield Static(id="agent-yaml")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#agent-yaml-page").focus()
        self.reload()

    def on_screen_resume(self) -> None:
        self.reload()

    def reload(self) -> None:
        self.read_file()

    @work(exclusive=True, exit_on_error=False, group="agent-yaml")
    async def read_file(self) -> None:
        self.post_message(await asyncio.to_thread(read_agent_yaml, self.path))

    def on_agent_yaml_read(self, message: AgentYamlRead) -> None:
        parts = []
        if message.text is not None:
            parts.append(Syntax(message.text, "yaml", theme="ansi_dark", word_wrap=True))
        if message.problem is not None:
            parts.append(Text(describe(message.problem), style="bold red"))
        else:
            parts.append(Text("The agent accepts this file.", style="green"))
        self.query_one("#agent-yaml", Static).update(Group(*parts))
        status = self.query_one("#status", Static)
        status.update(
            f"{self.path} · read-only · secrets hidden · changes apply when the agent restarts"
        )
        status.set_class(message.problem is not None and message.text is None, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)
