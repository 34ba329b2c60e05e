"""How usage sums read to people, in ``llmgw ctl usage`` and the console's Usage screen.

Both draw a group's row with ``usage_cells`` under ``dimension_headings`` and
``USAGE_COLUMNS``, and the requests over time with the reply's ``series``; the
screen asks for the periods of ``RANGES`` (ending now) grouped as one of
``GROUPINGS``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.text import Text

from llmgw.catalog.price import format_micros
from proto.llmgw.v1 import UsageGroup, UsageReply

USAGE_COLUMNS = (
    "REQUESTS",
    "ERRORS",
    "PROMPT",
    "CACHED",
    "COMPLETION",
    "COST",
    "AVG LATENCY",
    "AVG TTFT",
)
# Periods ending now the console offers: (what the selector says, length).
RANGES: dict[str, tuple[str, timedelta]] = {
    "1h": ("last hour", timedelta(hours=1)),
    "24h": ("last 24 h", timedelta(hours=24)),
    "7d": ("last 7 days", timedelta(days=7)),
    "30d": ("last 30 days", timedelta(days=30)),
}
# Groupings the console offers: (what the selector says, the dimensions asked for).
GROUPINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "project": ("project", ("project",)),
    "model": ("model", ("model",)),
    "project+model": ("project + model", ("project", "model")),
    "key": ("key", ("key",)),
}
_SPARKS = "▁▂▃▄▅▆▇█"


def period(length: timedelta, now: datetime | None = None) -> tuple[str, str]:
    """The ``length`` ending ``now`` as ISO times (UTC) for the admin API."""
    end = now or datetime.now(UTC)
    start = end - length
    return start.isoformat(timespec="seconds"), end.isoformat(timespec="seconds")


def dimension_headings(dims: list[str] | tuple[str, ...]) -> list[str]:
    return [d.upper().replace("_", " ") for d in dims]


def ms_text(value: float) -> str:
    """A time in milliseconds, or "-" for none: 850 → "850 ms", 1500 → "1.50 s"."""
    if not value:
        return "-"
    return f"{value:,.0f} ms" if value < 1000 else f"{value / 1000:,.2f} s"


def short_time(iso: str) -> str:
    """2026-09-01T13:47:12+00:00 → 2026-09-01 13:47:12."""
    return iso.replace("T", " ").removesuffix("+00:00")


def span_text(reply: UsageReply) -> str:
    return f"{short_time(reply.from_)} → {short_time(reply.to)} UTC"


def step_text(seconds: int) -> str:
    """A series step for people: 300 → "5 min", 3600 → "1 h"."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def sparkline(series: list[int]) -> str:
    """The series as block characters; any request shows above the baseline."""
    top = max(series, default=0)
    if not top:
        return _SPARKS[0] * len(series)
    # The busiest window is a full block.
    top_index = len(_SPARKS) - 1
    return "".join(_SPARKS[max(1, round(v * top_index / top)) if v else 0] for v in series)


def sum_cells(g, latency_ms: float, ttft_ms: float) -> list[str | Text]:
    """Sums as cells under ``USAGE_COLUMNS``; the averages given apart (a total has its own)."""
    return [
        f"{g.requests:,}",
        Text(f"{g.errors:,}", style="red" if g.errors else ""),
        f"{g.prompt_tokens:,}",
        f"{g.cached_tokens:,}",
        f"{g.completion_tokens:,}",
        format_micros(g.cost_micros),
        ms_text(latency_ms),
        ms_text(ttft_ms),
    ]


def usage_cells(g: UsageGroup, dims: list[str] | tuple[str, ...]) -> list[str | Text]:
    """One group as a row: its dimensions' values, then its sums."""
    return [*(g.group.get(d, "") for d in dims), *sum_cells(g, g.latency_ms_avg, g.ttft_ms_avg)]
