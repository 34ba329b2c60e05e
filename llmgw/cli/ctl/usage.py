"""``llmgw ctl usage``: what the gateway served over a period, summed; and every request as CSV.

Periods are UTC and default to the last 24 hours; ``--to`` is not included,
so ``--from 2026-09-01 --to 2026-10-01`` is September.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json as _json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmgw.admin_client import AdminClient
from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import LlmgwError, UsageError
from llmgw.paths import resolve
from llmgw.present import output
from llmgw.present.keyfmt import parse_duration
from llmgw.present.output import renders
from llmgw.present.usagefmt import (
    USAGE_COLUMNS,
    dimension_headings,
    span_text,
    sparkline,
    step_text,
    sum_cells,
    usage_cells,
)
from llmgw.protojson import to_plain
from proto.llmgw.v1 import UsageReply, UsageRowView

# Its help is the callback's docstring (`usage` below).
usage_app = typer.Typer()

DEFAULT_PERIOD = timedelta(hours=24)
DIMENSIONS = "project, team, org, key, model, served_model, replica, status"
EXPORT_COLUMNS = (
    "at",
    "key_id",
    "project",
    "model",
    "served_model",
    "replica",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "cost_micros",
    "latency_ms",
    "ttft_ms",
    "status",
    "profile",
)
GROUP_SUMS = (
    "requests",
    "errors",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "cost_micros",
    "latency_ms_avg",
    "ttft_ms_avg",
)
_AGE = re.compile(r"(\d+[smhdw])+")

ByOpt = typer.Option("", "--by", help=f"Group by, comma separated: {DIMENSIONS}.")
FromOpt = typer.Option(
    "",
    "--from",
    help="Start: a date (2026-09-01), a time (2026-09-01T13:30) or an age (7d, 12h). "
    "UTC. Default: 24 hours before --to.",
)
ToOpt = typer.Option("", "--to", help="End, not included; written as --from. Default: now.")
ProjectOpt = typer.Option(
    "", "--project", help="Only this project; an org or team path takes all beneath it."
)
KeyOpt = typer.Option("", "--key", help="Only this key (its id: key_…).")


def _when(text: str, flag: str, now: datetime) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    if _AGE.fullmatch(text):
        return now - timedelta(seconds=parse_duration(text))
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{flag} {text!r} is not a date, a time or an age",
            hint="write it like 2026-09-01, 2026-09-01T13:30 (UTC) or 7d",
        ) from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def period(from_text: str, to_text: str, now: datetime | None = None) -> tuple[str, str]:
    """--from and --to as ISO times for the admin API; the last 24 hours by default."""
    now = now or datetime.now(UTC)
    end = _when(to_text, "--to", now) or now
    start = _when(from_text, "--from", now) or end - DEFAULT_PERIOD
    return start.isoformat(timespec="seconds"), end.isoformat(timespec="seconds")


def _dimensions(by: str) -> list[str]:
    return [d.strip() for d in by.split(",") if d.strip()]


@usage_app.callback(invoke_without_command=True)
def usage(
    ctx: typer.Context,
    by: str = ByOpt,
    from_: str = FromOpt,
    to: str = ToOpt,
    project: str = ProjectOpt,
    key: str = KeyOpt,
    json: bool = JsonOpt,
) -> None:
    """Requests, errors, tokens, cost, average latency and TTFT over the last 24 hours,
    or over --from/--to (UTC). `export` writes every request as CSV."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        start, end = period(from_, to)
    except UsageError as e:
        raise typer.Exit(code=output.fail(e)) from None
    dims = _dimensions(by)
    call(
        lambda c: c.usage(dims, from_=start, to=end, project=project, key_id=key),
        json=json,
        next_step=f"Every request of it as CSV: llmgw ctl usage export --from {start} --to {end}",
    )


@usage_app.command("export")
def export(
    as_csv: bool = typer.Option(False, "--csv", help="CSV with a header row (the default)."),
    json: bool = typer.Option(False, "--json", help="One JSON object a line instead of CSV."),
    from_: str = FromOpt,
    to: str = ToOpt,
    project: str = ProjectOpt,
    key: str = KeyOpt,
    by: str = typer.Option(
        "", "--by", help=f"Sums per group instead of single requests: {DIMENSIONS}."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Write to this file (whole, or not at all) instead of stdout."
    ),
) -> None:
    """Every request of the last 24 hours (or of --from/--to, UTC), oldest first, as it streams."""
    try:
        if as_csv and json:
            raise UsageError("--csv and --json both given", hint="choose one")
        start, end = period(from_, to)
        n = asyncio.run(_export(start, end, project, key, _dimensions(by), json, out))
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    except BrokenPipeError:
        # `| head`: the reader has what it wanted. Point stdout at /dev/null so
        # the interpreter's last flush does not complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    if out is not None:
        output.stdout.print(f"Wrote {n} {'groups' if by else 'requests'} to {out}")


async def _export(
    start: str, end: str, project: str, key: str, dims: list[str], json: bool, out: Path | None
) -> int:
    """Write the export; the number of lines written after the header."""
    n = 0
    async with AdminClient.from_paths(resolve()) as client:
        if dims:
            reply = await client.usage(dims, from_=start, to=end, project=project, key_id=key)
            with _destination(out) as f:
                if json:
                    f.write(_json.dumps(to_plain(reply)) + "\n")
                    return len(reply.groups)
                w = csv.writer(f, lineterminator="\n")
                w.writerow([*dims, *GROUP_SUMS])
                for g in reply.groups:
                    w.writerow([*(g.group.get(d, "") for d in dims), *_group_cells(g)])
                return len(reply.groups)
        rows = client.export_usage(from_=start, to=end, project=project, key_id=key)
        with _destination(out) as f:
            w = csv.writer(f, lineterminator="\n")
            if not json:
                w.writerow(EXPORT_COLUMNS)
            async for row in rows:
                if json:
                    f.write(_json.dumps(to_plain(row)) + "\n")
                else:
                    w.writerow(_row_cells(row))
                n += 1
    return n


def _group_cells(g) -> list:
    return [
        g.requests,
        g.errors,
        g.prompt_tokens,
        g.cached_tokens,
        g.completion_tokens,
        g.cost_micros,
        round(g.latency_ms_avg, 3),
        round(g.ttft_ms_avg, 3) if g.ttft_ms_avg else "",
    ]


def _row_cells(r: UsageRowView) -> list:
    cells = [getattr(r, c) for c in EXPORT_COLUMNS]
    # No first token is sent as 0; a blank cell says "none" without faking a time.
    cells[EXPORT_COLUMNS.index("ttft_ms")] = r.ttft_ms or ""
    return cells


@contextlib.contextmanager
def _destination(out: Path | None) -> Iterator[TextIO]:
    """stdout, or a temporary file beside ``out`` renamed onto it once complete."""
    if out is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    out = out.expanduser()
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    except OSError as e:
        raise UsageError(f"cannot write into {out.parent}: {e.strerror}") from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            yield f
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@renders(UsageReply)
def _usage(reply: UsageReply):
    span = span_text(reply)
    if not reply.groups:
        return Text(f"No requests {span}.")
    dims = list(reply.groups[0].group)
    t = Table(title=f"Usage {span}", title_justify="left")
    for heading in dimension_headings(dims):
        t.add_column(heading)
    for col in USAGE_COLUMNS:
        t.add_column(col, justify="right")
    for g in reply.groups:
        t.add_row(*usage_cells(g, dims))
    if len(reply.groups) > 1:
        total = _Total(reply)
        # The TTFT average needs each group's count of first tokens, which the
        # reply does not carry: left blank rather than guessed.
        t.add_section()
        t.add_row(*(["total"] + [""] * (len(dims) - 1)), *sum_cells(total, total.latency, 0.0))
    if not reply.series:
        return t
    spark = Text.assemble(
        (f"requests per {step_text(reply.series_step_s)}: ", "dim"), sparkline(list(reply.series))
    )
    return Group(t, spark)


class _Total:
    """The groups added up; the latency average weighted by requests (exact)."""

    def __init__(self, reply: UsageReply) -> None:
        gs = reply.groups
        for f in ("requests", "errors", "prompt_tokens", "cached_tokens", "completion_tokens"):
            setattr(self, f, sum(getattr(g, f) for g in gs))
        self.cost_micros = sum(g.cost_micros for g in gs)
        weighted = sum(g.latency_ms_avg * g.requests for g in gs)
        self.latency = weighted / self.requests if self.requests else 0.0
