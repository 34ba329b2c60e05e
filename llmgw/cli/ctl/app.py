"""``llmgw ctl``: scriptable operations against a running control plane.

Each command calls one AdminClient method and hands its reply to
``output.emit``: a table for people, the reply itself with ``--json``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

import llmgw.cli.ctl.render.cluster  # noqa: F401  (registers the renderers)
from llmgw.admin_client import AdminClient
from llmgw.cli.ctl.bench import bench_app
from llmgw.errors import LlmgwError, UsageError
from llmgw.labels import check_keys, parse_assignments
from llmgw.paths import resolve
from llmgw.present import output
from llmgw.present.keyfmt import parse_duration
from llmgw.present.opsfmt import (
    NO_WARNINGS,
    WARNING_COLUMNS,
    removed_node_text,
    restart_text,
    warning_cells,
)
from llmgw.present.output import renders
from proto.llmgw.v1 import RemoveNodeReply, RestartReplicaReply, WarningsReply

app = typer.Typer(
    help="Operate a running control plane (what the console does, scriptable).",
    no_args_is_help=True,
)
node_app = typer.Typer(help="One node.", no_args_is_help=True)
app.add_typer(node_app, name="node")
replica_app = typer.Typer(help="One replica.", no_args_is_help=True)
app.add_typer(replica_app, name="replica")
app.add_typer(bench_app, name="bench")

JsonOpt = typer.Option(False, "--json", help="Print the admin reply as JSON, and nothing else.")


def call(
    method: Callable[[AdminClient], Awaitable[Any]], *, json: bool, next_step: str = ""
) -> None:
    """Run one admin call and print its reply; errors to stderr with their exit code."""

    async def go():
        async with AdminClient.from_paths(resolve()) as client:
            return await method(client)

    try:
        reply = asyncio.run(go())
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    output.emit(reply, json=json, next_step=next_step)


@app.command()
def status(json: bool = JsonOpt) -> None:
    """The control plane: version, role, store, node counts."""
    call(lambda c: c.status(), json=json)


@app.command()
def nodes(json: bool = JsonOpt) -> None:
    """Every node with its state and the reason for it."""
    call(lambda c: c.list_nodes(), json=json)


@node_app.command("show")
def node_show(
    node_id: str = typer.Argument(..., help="The node id."), json: bool = JsonOpt
) -> None:
    """One node's host facts, GPUs and state."""
    call(lambda c: c.get_node(node_id), json=json)


@app.command()
def cordon(node_id: str = typer.Argument(..., help="The node id."), json: bool = JsonOpt) -> None:
    """Place nothing new on a node (what runs there stays)."""
    call(
        lambda c: c.cordon_node(node_id),
        json=json,
        next_step=f"Undo it: llmgw ctl uncordon {node_id}",
    )


@app.command()
def uncordon(node_id: str = typer.Argument(..., help="The node id."), json: bool = JsonOpt) -> None:
    """Let placement use a cordoned node again."""
    call(lambda c: c.uncordon_node(node_id), json=json)


@node_app.command("label")
def node_label(
    node_id: str = typer.Argument(..., help="The node id."),
    labels: list[str] = typer.Argument(
        None, help="Labels to set, KEY=VALUE (zone=a, llmgw.role=judge).", show_default=False
    ),
    remove: list[str] = typer.Option(
        [],
        "--rm",
        help="Remove an operator label, KEY (repeatable). Where the node's agent.yaml has that"
        " label too, its value shows again.",
        show_default=False,
    ),
    json: bool = JsonOpt,
) -> None:
    """Set or remove a node's labels; placement sees them at once.

    The node's own labels come from labels: in its agent.yaml; those set here
    are kept by the control plane and win over them. A model with labels
    places only on nodes that have them all, and a node labelled llmgw.role
    takes only models that ask for that role.
    """
    try:
        set_ = parse_assignments(labels or [])
        keys = check_keys(remove)
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    if not set_ and not keys:
        e = UsageError(
            "give labels to set (KEY=VALUE) or --rm KEY to remove one",
            hint=f"e.g. llmgw ctl node label {node_id} zone=a",
        )
        raise typer.Exit(code=output.fail(e))
    call(
        lambda c: c.label_node(node_id, set_, keys),
        json=json,
        next_step="Check where models go: llmgw ctl explain-placement MODEL",
    )


@node_app.command("rm")
def node_rm(node_id: str = typer.Argument(..., help="The node id."), json: bool = JsonOpt) -> None:
    """Forget a node: refused while it runs replicas or is connected and not drained."""
    call(lambda c: c.remove_node(node_id), json=json, next_step="Check it: llmgw ctl nodes")


@replica_app.command("restart")
def replica_restart(
    replica_id: str = typer.Argument(..., help="The replica (see llmgw ctl replicas)."),
    json: bool = JsonOpt,
) -> None:
    """Replace a replica: it finishes what it answers and stops, and a new one takes its place.

    A failed or unplaced one is tried again now.
    """
    call(lambda c: c.restart_replica(replica_id), json=json)


@app.command("warnings")
def warnings(
    since: str = typer.Option("1h", "--since", help="How far back: 30m, 1h, 2d …"),
    json: bool = JsonOpt,
) -> None:
    """What is wrong now (nodes, engines, replicas) and what went wrong since then."""
    try:
        since_s = parse_duration(since)
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    call(lambda c: c.warnings(since_s), json=json)


@renders(RemoveNodeReply)
def _removed(r: RemoveNodeReply):
    return Text(removed_node_text(r))


@renders(RestartReplicaReply)
def _restarted(r: RestartReplicaReply):
    return Text(restart_text(r))


@renders(WarningsReply)
def _warnings(reply: WarningsReply):
    if not reply.warnings:
        return Text(f"No warnings since {reply.since}." if reply.since else NO_WARNINGS)
    t = Table(title=f"Warnings since {reply.since}", title_justify="left")
    for col in WARNING_COLUMNS:
        t.add_column(col, overflow="fold")
    for w in reply.warnings:
        t.add_row(*warning_cells(w))
    return t
