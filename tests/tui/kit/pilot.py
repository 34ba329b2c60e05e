"""Small helpers the console's dialog tests share: waiting on the pilot, reading a Static."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from tui.app import LlmgwApp


async def wait_until(pilot: Pilot, cond: Callable[[], bool], *, tries: int = 400) -> None:
    """Let the app run until ``cond()`` holds (bounded), checked between its frames."""
    for _ in range(tries):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"gave up waiting for {cond}")


def text(app: LlmgwApp, selector: str) -> str:
    """The plain text a Static of the current screen shows."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(app.screen.query_one(selector, Static).content)
    return console.export_text()
