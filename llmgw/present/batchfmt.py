"""How batches read to people, in ``llmgw ctl batches`` and the console's Batches screen.

``llmgw ctl batches list`` and the screen's table build their rows from
``batch_cells`` under ``BATCH_COLUMNS``; ``llmgw ctl batches show`` and the
pane under the screen's table draw one batch with ``batch_details``. Progress
is the requests answered (completed or failed) of the batch's total, as
``120/200`` with a bar and a percentage: the same characters in both. Both
show and cancel through ``get_batch``/``cancel_batch`` here, which say a
refusal in the same plain words (no such batch, already finished).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from llmgw.errors import ConflictError, LlmgwError, NotFoundError, UsageError
from llmgw.present.usagefmt import short_time
from proto.llmgw.v1 import BatchView

if TYPE_CHECKING:
    from llmgw.admin_client import AdminClient

# Where a batch is comes first: in 80 columns, what it runs may be cut, not its progress.
BATCH_COLUMNS = (
    "BATCH",
    "STATUS",
    "PROGRESS",
    "FAILED",
    "CREATED",
    "PROJECT",
    "ENDPOINT",
    "MODELS",
)
# OpenAI's statuses, in the order a batch goes through them.
STATUSES = (
    "validating",
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
)
# A batch in one of these has ended: nothing more runs, nothing can be cancelled.
FINISHED = frozenset({"completed", "failed", "expired", "cancelled"})
STATUS_STYLE = {
    "validating": "dim",
    "in_progress": "cyan",
    "finalizing": "cyan",
    "completed": "green",
    "failed": "bold red",
    "expired": "red",
    "cancelling": "yellow",
    "cancelled": "yellow",
}
NO_BATCHES = (
    "No batches. Clients make them with the Batch API: "
    "POST /v1/files (purpose batch), then POST /v1/batches."
)
# Ten cells: a tenth of the batch each, readable at a glance in 80 columns.
BAR_CELLS = 10
# The times a batch records, in the order they happen, with the words people read.
TIMES = (
    ("created_at", "created"),
    ("in_progress_at", "started"),
    ("finalizing_at", "finalizing"),
    ("completed_at", "completed"),
    ("failed_at", "failed"),
    ("expired_at", "expired"),
    ("cancelling_at", "cancelling"),
    ("cancelled_at", "cancelled"),
    ("expires_at", "expires"),
)


def check_status(text: str) -> str:
    """A --status filter as typed: one of OpenAI's statuses, or "" for all."""
    status = text.strip().lower().replace("-", "_")
    if status and status not in STATUSES:
        raise UsageError(
            f"{text!r} is not a batch status",
            hint=f"use one of: {', '.join(STATUSES)}",
        )
    return status


def counts(b: BatchView) -> tuple[int, int, int]:
    """(answered, failed, total): answered counts the failed too, as done with."""
    c = b.request_counts
    if c is None:
        return 0, 0, 0
    return c.completed + c.failed, c.failed, c.total


def progress_text(b: BatchView) -> Text:
    """``███████░░░ 140/200 70%``: the bar and the figures; "-" before the input is read."""
    done, _, total = counts(b)
    if not total:
        return Text("-", style="dim")
    filled = min(BAR_CELLS, done * BAR_CELLS // total)
    # Rounded down, so that 100 % means every request answered.
    pct = done * 100 // total
    style = STATUS_STYLE.get(b.status, "")
    return Text.assemble(
        ("█" * filled, style or "cyan"),
        ("░" * (BAR_CELLS - filled), "dim"),
        f" {done:,}/{total:,} {pct}%",
    )


def status_text(status: str) -> Text:
    return Text(status or "-", style=STATUS_STYLE.get(status, ""))


def batch_cells(b: BatchView) -> tuple[str | Text, ...]:
    """One batch as a row under ``BATCH_COLUMNS``."""
    _, failed, _ = counts(b)
    return (
        b.id,
        status_text(b.status),
        progress_text(b),
        Text(f"{failed:,}", style="red" if failed else ""),
        short_time(b.created_at) if b.created_at else "-",
        b.project,
        b.endpoint,
        ",".join(b.models) or "-",
    )


def batch_summary(b: BatchView) -> str:
    """One line saying where a batch is: "batch_… in_progress: 140/200 answered, 3 failed"."""
    done, failed, total = counts(b)
    said = f"Batch {b.id} is {b.status}"
    if total:
        said += f": {done:,} of {total:,} requests answered"
        if failed:
            said += f", {failed:,} failed"
    return said + "."


def cancel_text(b: BatchView) -> str:
    """What ``batches cancel`` and the screen's cancel say once gatewayd took it."""
    if b.status == "cancelled":
        return f"{batch_summary(b)} Its output file holds what was answered before."
    return (
        f"{batch_summary(b)} Requests in flight finish; no new one starts. "
        "It ends as cancelled, with what was answered in its output file."
    )


def batch_details(b: BatchView) -> Table:
    """One batch: what it runs, where it is, its files and times, why it failed."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    done, failed, total = counts(b)
    t.add_row("batch", b.id)
    t.add_row("project", b.project)
    t.add_row("key", b.key_id or "-")
    t.add_row("endpoint", b.endpoint)
    t.add_row("models", ", ".join(b.models) or "-")
    t.add_row("status", status_text(b.status))
    t.add_row("progress", progress_text(b))
    if total:
        c = b.request_counts
        t.add_row(
            "requests",
            f"{total:,} in all: {c.completed:,} completed, {failed:,} failed, "
            f"{total - done:,} to go",
        )
    t.add_row("input file", b.input_file_id or "-")
    t.add_row("output file", b.output_file_id or "-")
    t.add_row("error file", b.error_file_id or "-")
    t.add_row("window", b.completion_window or "-")
    for field, word in TIMES:
        value = getattr(b, field)
        if value:
            t.add_row(word, short_time(value) + " UTC")
    for k in sorted(b.metadata):
        t.add_row(f"metadata {k}", b.metadata[k])
    for line in b.errors:
        t.add_row(Text("error", style="red"), line)
    return t


def next_step(b: BatchView) -> str:
    """What to do next with a batch, as the command's last line."""
    if b.status not in FINISHED:
        return f"Stop it: llmgw ctl batches cancel {b.id}"
    if b.output_file_id:
        return f"Its answers: GET /v1/files/{b.output_file_id}/content (with the project's key)"
    return ""


# -- the calls both make, with refusals in plain words ---------------------------------


def no_such_batch(batch_id: str) -> NotFoundError:
    return NotFoundError(
        f"there is no batch {batch_id}",
        hint="see the batches there are: llmgw ctl batches list",
    )


def already_finished(b: BatchView) -> UsageError:
    return UsageError(
        f"batch {b.id} has already finished ({b.status}): there is nothing to cancel",
        hint=f"see what it did: llmgw ctl batches show {b.id}",
    )


async def get_batch(client: AdminClient, batch_id: str) -> BatchView:
    """``client.get_batch``, a missing batch said as such."""
    try:
        return await client.get_batch(batch_id)
    except NotFoundError as e:
        raise no_such_batch(batch_id) from e


async def cancel_batch(client: AdminClient, batch_id: str) -> BatchView:
    """``client.cancel_batch``; a batch missing or already finished said as such.

    gatewayd decides (a batch may finish between a look and the cancel); when
    it refuses, the batch is read to say why in words an operator can act on.
    """
    try:
        b = await client.cancel_batch(batch_id)
    except NotFoundError as e:
        raise no_such_batch(batch_id) from e
    except (UsageError, ConflictError) as refused:
        try:
            b = await client.get_batch(batch_id)
        except LlmgwError:
            raise refused from None
        if b.status in FINISHED:
            raise already_finished(b) from refused
        raise
    # Cancelled is what was asked for (at once, when nothing was in flight); any
    # other end means it had finished before.
    if b.status in FINISHED - {"cancelled"}:
        raise already_finished(b)
    return b
