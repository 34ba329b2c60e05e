"""``llmgw start|stop|restart``: whatever llmgw runs on this machine, in order (llmgw/setup/services.py).

Plain command functions; the table in llmgw/cli/main.py names them.
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from rich.text import Text

from llmgw.errors import ExitCode
from llmgw.paths import ENV_HOME, resolve
from llmgw.present import output
from llmgw.setup.services import PartResult, Services, ServicesReply

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def start(json_output: JsonFlag = False) -> None:
    """Start what llmgw runs here: mirror, control plane, agent (each when set up)."""
    _run("start", json_output)


def stop(json_output: JsonFlag = False) -> None:
    """Stop what llmgw runs here: agent (its engines keep running), control plane, mirror."""
    _run("stop", json_output)


def restart(json_output: JsonFlag = False) -> None:
    """Stop, then start, what llmgw runs here."""
    _run("restart", json_output)


def _run(command: Literal["start", "stop", "restart"], json_output: bool) -> None:
    paths = resolve()
    svc = Services(paths)
    parts: list[PartResult] = []
    if command in ("stop", "restart"):
        parts += svc.stop()
    if command in ("start", "restart"):
        parts += svc.start()
    reply = ServicesReply(command=command, parts=parts, ok=all(p.ok for p in parts))
    home = f"{ENV_HOME}={paths.home} " if paths.home is not None else ""
    next_step = ""
    if reply.ok and any(p.action in ("started", "already running") for p in parts):
        next_step = f"Check it: {home}llmgw ctl status"
    elif all(p.action == "not set up here" for p in parts):
        next_step = "Nothing is set up here: llmgw server init (or llmgw up)"
    output.emit(reply, json=json_output, next_step=next_step)
    if not reply.ok:
        raise typer.Exit(code=int(ExitCode.ERROR))


@output.renders(ServicesReply)
def _render(reply: ServicesReply) -> Text:
    out = Text()
    for i, p in enumerate(reply.parts):
        if i:
            out.append("\n")
        out.append(f"{p.part}: ")
        style = {"failed": "bold red", "killed": "yellow"}.get(p.action, "")
        if p.action in ("started", "stopped"):
            style = "green"
        out.append(p.action, style=style)
        said = [f"pid {p.pid}"] if p.pid else []
        if p.via == "systemd":
            said.append("systemd")
        if said:
            out.append(f" ({', '.join(said)})")
        if p.detail:
            out.append(f" — {p.detail}")
    return out
