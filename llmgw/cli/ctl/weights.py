"""``llmgw ctl weights``: the model weights each node keeps on its disk, and removing them.

``weights [NODE]`` lists every node's cache (or one node's) as the node last
reported it: a line of what it holds of its limit, then its entries, newest
use first — the bottom rows are the ones the node removes first when its cache
passes its limit. ``weights rm NODE KEY…`` removes entries (``--unused``: every
entry no replica uses); weights a replica uses are kept, saying by which. The
console's Weights dialog (f on Nodes) calls the same client methods.
"""

from __future__ import annotations

import asyncio

import click
import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from llmgw.admin_client import AdminClient
from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import ExitCode, LlmgwError
from llmgw.paths import resolve
from llmgw.present import output
from llmgw.present.nodefmt import NO_NODES
from llmgw.present.output import renders
from llmgw.present.weightsfmt import (
    NO_ENTRIES,
    WEIGHTS_COLUMNS,
    node_line,
    node_notes,
    removed_text,
    sorted_entries,
    weights_cells,
    weights_key,
)
from proto.llmgw.v1 import ListWeightsReply, RemoveWeightsReply


class NodeOrCommand(TyperGroup):
    """``weights NODE`` is ``weights list NODE``: a first word that is no command is a node."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        words = [a for a in args if not a.startswith("-")]
        if words and words[0] not in self.commands:
            at = args.index(words[0])
            args = [*args[:at], "list", *args[at:]]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return ["[NODE]", "[--json]", "|", "rm", "NODE", "KEY...", "[--unused]", "[--json]"]


weights_app = typer.Typer(cls=NodeOrCommand)


def _list(node_id: str, json: bool) -> None:
    call(
        lambda c: c.list_weights(node_id),
        json=json,
        next_step="Remove unused weights: llmgw ctl weights rm NODE KEY (or --unused)",
    )


@weights_app.callback(invoke_without_command=True)
def weights(ctx: typer.Context, json: bool = JsonOpt) -> None:
    """The model weights each node keeps on its disk: size, last use, which replicas use them.

    A node removes unused weights, oldest use first, when its cache passes its
    share of the disk (agents.default.weights_cache_percent, 50 unless set,
    and weights_cache_max_bytes). `llmgw ctl weights NODE` shows one node;
    `rm` removes weights no replica uses.
    """
    if ctx.invoked_subcommand is None:
        _list("", json)


@weights_app.command("list")
def weights_list(
    ctx: typer.Context,
    node_id: str = typer.Argument("", help="One node (all when left out).", show_default=False),
    json: bool = JsonOpt,
) -> None:
    """What a node's weights cache holds (every node's without NODE); the same as `weights NODE`."""
    _list(node_id, json or bool(ctx.parent and ctx.parent.params.get("json")))


@weights_app.command("rm")
def weights_rm(
    ctx: typer.Context,
    node_id: str = typer.Argument(..., help="The node (see llmgw ctl weights)."),
    keys: list[str] = typer.Argument(
        None,
        help="Entries to remove: a KEY as `llmgw ctl weights` lists it (a model's name, or"
        " hf/ORG/REPO/COMMIT), hf/ORG/REPO for every commit of it, or hf:ORG/REPO@COMMIT.",
        show_default=False,
    ),
    unused: bool = typer.Option(False, "--unused", help="Also remove every entry no replica uses."),
    json: bool = JsonOpt,
) -> None:
    """Remove weights from a node's disk; those a replica uses are kept, saying by which.

    A named entry kept makes the command fail. A replica started later on a
    model whose weights were removed fetches them again.
    """
    json = json or bool(ctx.parent and ctx.parent.params.get("json"))
    names = list(keys or [])

    async def go() -> RemoveWeightsReply:
        async with AdminClient.from_paths(resolve()) as client:
            return await client.remove_weights(node_id, names, unused=unused)

    try:
        reply = asyncio.run(go())
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    output.emit(reply, json=json, next_step=f"Check it: llmgw ctl weights {node_id}")
    # A named entry kept is a removal refused: scripts see it. With --unused alone,
    # entries in use are kept by design.
    named = [weights_key(n) for n in names]
    kept = [k.partition(":")[0] for k in reply.kept]
    if any(key == n or key.startswith(f"{n}/") for key in kept for n in named):
        raise typer.Exit(code=int(ExitCode.ERROR))


# -- how the replies look to people -------------------------------------------------------


def entries_table(entries) -> Table:
    t = Table(title_justify="left", box=None, pad_edge=False, padding=(0, 2, 0, 2))
    for col in WEIGHTS_COLUMNS:
        t.add_column(col, overflow="fold")
    for e in sorted_entries(list(entries)):
        t.add_row(*weights_cells(e))
    return t


@renders(ListWeightsReply)
def _weights(reply: ListWeightsReply):
    if not reply.nodes:
        return Text(NO_NODES)
    parts: list = []
    for n in reply.nodes:
        if parts:
            parts.append(Text(""))
        parts.append(node_line(n))
        parts += node_notes(n)
        if n.reported_at and n.report is not None:
            if n.report.entries:
                parts.append(entries_table(n.report.entries))
            else:
                parts.append(Text(f"  {NO_ENTRIES}", style="dim"))
    return Group(*parts)


@renders(RemoveWeightsReply)
def _removed(reply: RemoveWeightsReply):
    return removed_text(reply)
