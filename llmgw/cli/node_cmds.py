"""``llmgw node add HOST`` and ``llmgw node remove NODE``: onboarding over SSH.

Plain command functions over llmgw.onboard; llmgw/cli/main.py names them
in the ``node`` group. People get a line per step; ``--json`` prints every
step event as one line of JSON (NDJSON), the last one the result.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Annotated

import typer
from rich.console import Console

from llmgw.cli import ssh_options as ssh
from llmgw.errors import LlmgwError
from llmgw.labels import parse_assignments
from llmgw.onboard import AddPlan, RemovePlan, SshTarget, StepEvent, add_node, remove_node
from llmgw.onboard.words import event_lines
from llmgw.paths import resolve


def node_add(
    host: ssh.Host,
    user: ssh.User = "",
    port: ssh.Port = 0,
    identity: ssh.Identity = "",
    accept_new_host_key: ssh.AcceptNewHostKey = False,
    known_hosts: ssh.KnownHosts = "",
    node_id: Annotated[
        str, typer.Option("--node-id", help="The node's id (default: its short hostname).")
    ] = "",
    control_plane: Annotated[
        list[str] | None,
        typer.Option(
            "--control-plane",
            help="HOST:PORT the node dials, several comma separated (default: the cluster's).",
        ),
    ] = None,
    install_root: Annotated[
        str, typer.Option("--install-root", help="Put everything on the node under this folder.")
    ] = "",
    wheelhouse: ssh.Wheelhouse = "",
    python: Annotated[
        str, typer.Option("--python", help="The node's Python 3.11+ (default python3).")
    ] = "python3",
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="A label for the node's agent.yaml, KEY=VALUE (repeatable): zone=a,"
            " llmgw.role=judge. Labels agent.yaml has already are kept.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per step event.")
    ] = False,
) -> None:
    """Add a machine over SSH: check it, install llmgw and its agent, join it to the cluster."""
    if problem := ssh.wheelhouse_problem(wheelhouse):
        _usage(problem, json_output)
    try:
        labels = parse_assignments(label or [], flag="--label")
    except LlmgwError as e:
        _usage(e.message, json_output)
    plan = AddPlan(
        target=ssh.target(host, user, port, identity, known_hosts, accept_new_host_key),
        paths=resolve(),
        node_id=node_id,
        control_planes=control_plane or [],
        install_root=install_root,
        wheelhouse=wheelhouse,
        python=python,
        labels=labels,
    )
    raise typer.Exit(code=_drive(add_node(plan), json_output))


def node_remove(
    node: Annotated[str, typer.Argument(help="The node's id.")],
    host: Annotated[
        str, typer.Option("--host", help="Reach it here (default: what node add used).")
    ] = "",
    user: Annotated[str, typer.Option("--user", help="SSH login.")] = "",
    port: Annotated[
        int,
        typer.Option(
            "--port", min=0, max=65535, show_default=False, help="SSH port (default: as added)."
        ),
    ] = 0,
    identity: Annotated[str, typer.Option("--identity", help="Private key to log in with.")] = "",
    known_hosts: Annotated[str, typer.Option("--known-hosts", help="known_hosts file.")] = "",
    install_root: Annotated[
        str | None, typer.Option("--install-root", help="Where node add put llmgw on it.")
    ] = None,
    no_stop: Annotated[
        bool, typer.Option("--no-stop", help="Do not log in to stop the agent (revoke only).")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per step event.")
    ] = False,
) -> None:
    """Remove a node: drain it, stop and disable its agent, revoke its certificate."""
    from llmgw.onboard.plan import load_record

    paths = resolve()
    target = None
    if host or user or port or identity or known_hosts:
        rec = load_record(paths, node)
        base = rec.target() if rec else SshTarget(host=host)
        target = SshTarget(
            host=host or base.host,
            port=port or base.port,
            user=user or base.user,
            identity=identity or base.identity,
            known_hosts=known_hosts or base.known_hosts,
        )
        if not target.host:
            _usage("give --host: node add left no record of how it reached this node", json_output)
    plan = RemovePlan(
        node_id=node, paths=paths, target=target, install_root=install_root, stop_agent=not no_stop
    )
    raise typer.Exit(code=_drive(remove_node(plan), json_output))


def _drive(events: AsyncIterator[StepEvent], json_output: bool) -> int:
    """Print every event as it comes; the exit code from the result."""
    console = Console(highlight=False)

    async def run() -> int:
        code = 1
        async for ev in events:
            if json_output:
                sys.stdout.write(ev.line() + "\n")
                sys.stdout.flush()
            else:
                _print(console, ev)
            if ev.step == "result" and ev.result is not None:
                code = int(ev.result.get("exit_code", 1))
        return code

    try:
        return asyncio.run(run())
    except KeyboardInterrupt:
        return 130


def _print(console: Console, ev: StepEvent) -> None:
    # The console's Add node dialog shows the same lines (llmgw.onboard.words).
    for line in event_lines(ev):
        console.print(line)


def _usage(message: str, json_output: bool) -> None:
    if json_output:
        ev = StepEvent(
            step="result",
            status="fail",
            detail=message,
            result={"ok": False, "exit_code": 2},
        )
        sys.stdout.write(ev.line() + "\n")
    else:
        print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code=2)
