"""``llmgw ctl batches``: the Batch API's batches, as an operator sees them across projects.

Clients make batches through the API (``POST /v1/batches`` with a file of
requests); here an operator follows them — what each runs, how far it is —
and stops one. ``list`` and ``show`` are what the console's Batches screen
shows; ``cancel`` is its cancel.
"""

from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import UsageError
from llmgw.present import output
from llmgw.present.batchfmt import (
    BATCH_COLUMNS,
    NO_BATCHES,
    STATUSES,
    batch_cells,
    batch_details,
    cancel_batch,
    check_status,
    get_batch,
)
from llmgw.present.output import renders
from proto.llmgw.v1 import BatchView, ListBatchesReply

batches_app = typer.Typer(
    help="Batches of the Batch API: list them with their progress, show one, cancel one.",
    no_args_is_help=True,
)

BatchArg = typer.Argument(..., help="The batch id (batch_…, see llmgw ctl batches list).")


@batches_app.command("list")
def list_batches(
    project: str = typer.Option(
        "", "--project", help="Only this project's batches (ORG/TEAM/PROJECT)."
    ),
    status: str = typer.Option(
        "", "--status", help=f"Only batches in this status: {', '.join(STATUSES)}."
    ),
    limit: int = typer.Option(
        0,
        "--limit",
        min=0,
        help="At most this many, newest first (default: 100).",
        show_default=False,
    ),
    json: bool = JsonOpt,
) -> None:
    """Batches, newest first, with their progress: requests answered of all, and failed."""
    try:
        wanted = check_status(status)
    except UsageError as e:
        raise typer.Exit(code=output.fail(e)) from None
    call(lambda c: c.list_batches(project=project, status=wanted, limit=limit), json=json)


@batches_app.command("show")
def show(batch_id: str = BatchArg, json: bool = JsonOpt) -> None:
    """One batch: its endpoint and models, progress, files, times and why it failed."""
    call(lambda c: get_batch(c, batch_id), json=json)


@batches_app.command("cancel")
def cancel(batch_id: str = BatchArg, json: bool = JsonOpt) -> None:
    """Stop a batch: no new request of it starts; those in flight finish.

    It is cancelling until they have, then cancelled; what was answered stays
    in its output file. A batch that has finished cannot be cancelled.
    """
    call(
        lambda c: cancel_batch(c, batch_id),
        json=json,
        next_step="It ends as cancelled once the requests in flight finish. "
        f"Follow it: llmgw ctl batches show {batch_id}",
    )


@renders(ListBatchesReply)
def _batches(reply: ListBatchesReply):
    if not reply.batches:
        return Text(NO_BATCHES)
    t = Table(title=f"Batches ({len(reply.batches)})", title_justify="left")
    for col in BATCH_COLUMNS:
        t.add_column(col, justify="right" if col == "FAILED" else "left")
    for b in reply.batches:
        t.add_row(*batch_cells(b))
    return t


@renders(BatchView)
def _batch(b: BatchView):
    return batch_details(b)
