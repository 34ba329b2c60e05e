"""``llmgw ctl`` commands for the control plane and its nodes and replicas.

Light to import (``llmgw ctl status`` is what a script asks first): the
renderers of these replies are imported once a reply is in, with the
generated proto it came in.
"""

from __future__ import annotations

import typer

from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import LlmgwError, UsageError
from llmgw.labels import check_keys, parse_assignments
from llmgw.present import output

_RENDERERS = "llmgw.cli.ctl.render.cluster"

node_app = typer.Typer(help="One node.", no_args_is_help=True)
replica_app = typer.Typer(help="One replica.", no_args_is_help=True)


def status(json: bool = JsonOpt) -> None:
    """The control plane: version, role, store, node counts."""
    call(lambda c: c.status(), json=json, renderers=_RENDERERS)


def nodes(json: bool = JsonOpt) -> None:
    """Every node with its state and the reason for it."""
    call(lambda c: c.list_nodes(), json=json, renderers=_RENDERERS)


@node_app.command("show")
def node_show(
    node_id: str = typer.Argument(..., help="The node id."), json: bool = JsonOpt
) -> None:
    """One node's host facts, GPUs and state."""
    call(lambda c: c.get_node(node_id), json=json, renderers=_RENDERERS)


def cordon(node_id: str = typer.Argument(..., help="The node id."), json: bool = JsonOpt) -> None:
    """Place nothing new on a node (what runs there stays)."""
    call(
        lambda c: c.cordon_node(node_id),
        json=json,
        renderers=_RENDERERS,
        next_step=f"Undo it: llmgw ctl uncordon {node_id}",
    )


def uncordon(node_id: str = typer.Argument(..., help="The node id."), json: bool = JsonOpt) -> None:
    """Let placement use a cordoned node again."""
    call(lambda c: c.uncordon_node(node_id), json=json, renderers=_RENDERERS)


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
        renderers=_RENDERERS,
        next_step="Check where models go: llmgw ctl explain-placement MODEL",
    )


@node_app.command("rm")
def node_rm(node_id: str = typer.Argument(..., help="The node id."), json: bool = JsonOpt) -> None:
    """Forget a node: refused while it runs replicas or is connected and not drained."""
    call(
        lambda c: c.remove_node(node_id),
        json=json,
        renderers=_RENDERERS,
        next_step="Check it: llmgw ctl nodes",
    )


@replica_app.command("restart")
def replica_restart(
    replica_id: str = typer.Argument(..., help="The replica (see llmgw ctl replicas)."),
    json: bool = JsonOpt,
) -> None:
    """Replace a replica: it finishes what it answers and stops, and a new one takes its place.

    A failed or unplaced one is tried again now.
    """
    call(lambda c: c.restart_replica(replica_id), json=json, renderers=_RENDERERS)


def warnings(
    since: str = typer.Option("1h", "--since", help="How far back: 30m, 1h, 2d …"),
    json: bool = JsonOpt,
) -> None:
    """What is wrong now (nodes, engines, replicas) and what went wrong since then."""
    from llmgw.present.keyfmt import parse_duration

    try:
        since_s = parse_duration(since)
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    call(lambda c: c.warnings(since_s), json=json, renderers=_RENDERERS)
