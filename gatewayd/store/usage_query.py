"""How usage is summed and read back, shared by both store backends.

Every request row is also added to three sums: its 5-minute, hourly and
daily bucket (UTC, aligned to the epoch, so a day starts at 00:00 UTC). A
question over a period is answered from the coarsest sums that fit inside it
and from the raw rows only at its ragged edges: a month is ~30 daily sums,
a few hourly and 5-minute ones, and the rows of at most two partial
5-minute buckets. Since every bucket either lies wholly inside the period or
is not read, the totals are exactly those of the rows.

The pure parts (bucket arithmetic, the batch's sums, the SQL) are plain
functions; ``UsageQueries`` holds the reading both backends share, over a
few hooks each backend provides (``_usage_fetch`` and two more).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gatewayd.store.usage_records import USAGE_DIMENSIONS, UsageFields, UsageRecord, UsageSum

# Bucket widths, coarsest first: a day, an hour, five minutes.
BUCKET_WIDTHS_S = (86400, 3600, 300)
# The width of a segment read from the raw rows.
RAW = 0

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Rows read per query by an export; the store is free for others between pages.
EXPORT_PAGE_ROWS = 1000

# The columns a sum row adds up, in this order everywhere.
SUM_COLUMNS = (
    "requests",
    "errors",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "cost_micros",
    "latency_ms_sum",
    "ttft_ms_sum",
    "ttft_count",
)
# The same, computed from one raw row (portable SQL: no booleans as numbers).
_ROW_EXPRESSIONS = (
    "1",
    "CASE WHEN status >= 400 THEN 1 ELSE 0 END",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "cost_micros",
    "latency_ms",
    "COALESCE(ttft_ms, 0)",
    "CASE WHEN ttft_ms IS NULL THEN 0 ELSE 1 END",
)
# What a sum is kept per, besides its bucket.
SUM_KEY_COLUMNS = (
    "key_id",
    "project_id",
    "project",
    "model",
    "served_model",
    "replica",
    "status",
)
ROW_COLUMNS = (
    "at",
    "key_id",
    "project_id",
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
    "batch_id",
)
# The columns a dimension is read from; team and org come off the project's path,
# which is the path of its id now (or last), else the path the row was recorded under.
_PROJECT = ("project_id", "project")
_DIMENSION_COLUMNS = {
    "project": _PROJECT,
    "team": _PROJECT,
    "org": _PROJECT,
    "key": ("key_id",),
    "model": ("model",),
    "served_model": ("served_model",),
    "replica": ("replica",),
    "status": ("status",),
}
# Every tenant id with its path now, or its last (a removed level's).
NAMES_SQL = "SELECT id, path FROM tenant_names"


def check_dimensions(by: Iterable[str]) -> list[str]:
    """The dimensions asked for, in order, each once; ValueError naming any unknown one."""
    wanted = [d.strip() for d in by if d.strip()]
    unknown = [d for d in wanted if d not in USAGE_DIMENSIONS]
    if unknown:
        raise ValueError(
            f"usage cannot be grouped by {', '.join(repr(d) for d in unknown)}:"
            f" use any of {', '.join(USAGE_DIMENSIONS)}"
        )
    return list(dict.fromkeys(wanted))


def floor_to(t: datetime, width_s: int) -> datetime:
    """The start of the ``width_s`` bucket holding ``t`` (UTC, epoch-aligned)."""
    n = (t - EPOCH) // timedelta(seconds=width_s)
    return EPOCH + timedelta(seconds=n * width_s)


def ceil_to(t: datetime, width_s: int) -> datetime:
    """The first bucket boundary at or after ``t``."""
    start = floor_to(t, width_s)
    return start if start == t else start + timedelta(seconds=width_s)


@dataclass(frozen=True)
class Segment:
    """A part of a period read from one source: sums of ``width_s``, or raw rows (RAW)."""

    width_s: int
    start: datetime
    end: datetime


def cover(start: datetime, end: datetime, widths: Sequence[int] = BUCKET_WIDTHS_S) -> list[Segment]:
    """[start, end) as whole buckets of the coarsest widths that fit, and raw rows for the rest.

    The segments do not overlap and together are exactly [start, end).
    """
    if start >= end:
        return []
    if not widths:
        return [Segment(RAW, start, end)]
    width, finer = widths[0], widths[1:]
    a, b = ceil_to(start, width), floor_to(end, width)
    if a >= b:
        return cover(start, end, finer)
    return [*cover(start, a, finer), Segment(width, a, b), *cover(b, end, finer)]


def batch_sums(rows: Iterable[UsageFields]) -> list[tuple]:
    """The batch's additions to the sums, one tuple per bucket and key, in key order.

    Each tuple is (bucket_s, bucket_start, *SUM_KEY_COLUMNS, *SUM_COLUMNS).
    Summing in Python first makes the batch one upsert per key, and the
    order keeps two control planes writing at once from taking row locks in
    opposite orders (a deadlock on PostgreSQL).
    """
    sums: dict[tuple, list] = {}
    for r in rows:
        project_id = getattr(r, "project_id", "")
        key = (r.key_id, project_id, r.project, r.model, r.served_model, r.replica, r.status)
        has_ttft = r.ttft_ms is not None
        for width in BUCKET_WIDTHS_S:
            acc = sums.get((width, floor_to(r.at, width), *key))
            if acc is None:
                acc = sums[(width, floor_to(r.at, width), *key)] = [0, 0, 0, 0, 0, 0, 0.0, 0.0, 0]
            acc[0] += 1
            acc[1] += r.status >= 400
            acc[2] += r.prompt_tokens
            acc[3] += r.cached_tokens
            acc[4] += r.completion_tokens
            acc[5] += r.cost_micros
            acc[6] += r.latency_ms
            if has_ttft:
                acc[7] += r.ttft_ms
                acc[8] += 1
    return [(*k, *v) for k, v in sorted(sums.items(), key=lambda kv: kv[0])]


class Params:
    """Query arguments and their placeholders: ``?`` (SQLite) or ``$n`` (PostgreSQL)."""

    def __init__(self, *, dollar: bool, encode_time: Callable[[datetime], Any]) -> None:
        self.args: list[Any] = []
        self._dollar = dollar
        self._encode_time = encode_time

    def __call__(self, value: Any) -> str:
        self.args.append(value)
        return f"${len(self.args)}" if self._dollar else "?"

    def time(self, t: datetime) -> str:
        return self(self._encode_time(t))


def filters(p: Params, project: str, key_id: str) -> list[str]:
    """WHERE conditions for one project (a path: itself and all beneath it) and one key."""
    out = []
    if project:
        path = project.strip("/")
        n = len(path) + 1
        # substr, not LIKE: SQLite's LIKE ignores case, and paths may hold '_' or '%'.
        # A row with an id is found by the id's path now (or last): a rename takes its
        # usage along; one without, by the path it was recorded under.
        ids = f"SELECT id FROM tenant_names WHERE path = {p(path)} OR substr(path, 1, {n}) = {p(path + '/')}"
        recorded = f"project = {p(path)} OR substr(project, 1, {n}) = {p(path + '/')}"
        out.append(f"(project_id IN ({ids}) OR (project_id = '' AND ({recorded})))")
    if key_id:
        out.append(f"key_id = {p(key_id)}")
    return out


def group_columns(by: Sequence[str]) -> list[str]:
    """The stored columns a grouping by ``by`` needs, each once."""
    return list(dict.fromkeys(c for d in by for c in _DIMENSION_COLUMNS[d]))


def groups_sql(
    columns: Sequence[str], segments: Sequence[Segment], p: Params, project: str, key_id: str
) -> str:
    """One statement summing every segment, grouped by ``columns``."""
    parts = []
    for seg in segments:
        if seg.width_s == RAW:
            sums = [f"{e} AS {c}" for e, c in zip(_ROW_EXPRESSIONS, SUM_COLUMNS, strict=True)]
            table = "usage_rows"
            where = [f"at >= {p.time(seg.start)}", f"at < {p.time(seg.end)}"]
        else:
            sums, table = list(SUM_COLUMNS), "usage_sums"
            where = [
                f"bucket_s = {p(seg.width_s)}",
                f"bucket_start >= {p.time(seg.start)}",
                f"bucket_start < {p.time(seg.end)}",
            ]
        where += filters(p, project, key_id)
        parts.append(
            f"SELECT {', '.join([*columns, *sums])} FROM {table} WHERE {' AND '.join(where)}"
        )
    totals = [f"SUM({c}) AS {c}" for c in SUM_COLUMNS]
    sql = f"SELECT {', '.join([*columns, *totals])} FROM ({' UNION ALL '.join(parts)}) AS u"
    return sql + (f" GROUP BY {', '.join(columns)}" if columns else "")


def project_path(row: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """The path a row is shown under: its id's path now (or last), else the path recorded."""
    return names.get(row["project_id"]) or str(row["project"])


def _dimension_value(dimension: str, row: Mapping[str, Any], names: Mapping[str, str]) -> str:
    if dimension in ("project", "team", "org"):
        path = project_path(row, names)
        if dimension == "project":
            return path
        parts = path.split("/")
        return "/".join(parts[:2] if dimension == "team" else parts[:1])
    return str(row[_DIMENSION_COLUMNS[dimension][0]])


def regroup(
    by: Sequence[str], rows: Iterable[Mapping[str, Any]], names: Mapping[str, str] | None = None
) -> list[UsageSum]:
    """Sum rows grouped by stored columns into groups of ``by``; most requests first.

    Needed because team and org are not columns: several projects' rows make one team;
    and a project's rows recorded under several paths (renamed since) make one project.
    ``names``: tenant id → its path now (or last).
    """
    names = names or {}
    merged: dict[tuple[str, ...], UsageSum] = {}
    for row in rows:
        if not row["requests"]:
            continue  # no rows at all: SUM over nothing is NULL
        group = {d: _dimension_value(d, row, names) for d in by}
        acc = merged.setdefault(tuple(group.values()), UsageSum(group=group))
        for c in SUM_COLUMNS:
            value = row[c] or 0
            # PostgreSQL sums bigints as numeric; asyncpg gives Decimal.
            setattr(acc, c, getattr(acc, c) + (float(value) if c.endswith("_sum") else int(value)))
    return sorted(merged.values(), key=lambda s: (-s.requests, tuple(s.group.values())))


def series_windows(start: datetime, end: datetime, step_s: int) -> list[tuple[datetime, datetime]]:
    """[start, end) cut at every multiple of ``step_s`` (UTC, epoch-aligned), oldest first.

    Cutting on the grid, not at ``start`` + n·step, keeps every whole window
    made of whole buckets; only the first and last may be partial.
    """
    if step_s <= 0 or step_s % BUCKET_WIDTHS_S[-1]:
        raise ValueError(f"a usage series step must be a multiple of 300 s, not {step_s}")
    windows = []
    lo, step = start, timedelta(seconds=step_s)
    while lo < end:
        hi = min(floor_to(lo, step_s) + step, end)
        windows.append((lo, hi))
        lo = hi
    return windows


def series_bucket_width(step_s: int) -> int:
    """The coarsest bucket width that divides ``step_s``."""
    return next(w for w in BUCKET_WIDTHS_S if step_s % w == 0)


def _aware(t: datetime) -> datetime:
    if t.tzinfo is None:
        # A naive time is ambiguous (local or UTC?); a guess would shift every bucket.
        raise ValueError(f"datetime {t.isoformat()} has no timezone; usage needs aware ones")
    return t


class UsageQueries:
    """The reading both backends share; each provides the three hooks below."""

    def _usage_params(self) -> Params:
        """Fresh arguments in the backend's placeholder style."""
        raise NotImplementedError

    async def _usage_fetch(self, sql: str, args: list[Any], what: str) -> list[Mapping[str, Any]]:
        """Run a query; driver errors come out as StoreError saying ``what`` failed."""
        raise NotImplementedError

    def _usage_time(self, value: Any) -> datetime:
        """A stored time as an aware datetime."""
        raise NotImplementedError

    async def usage_groups(
        self,
        by: Sequence[str],
        start: datetime,
        end: datetime,
        project: str = "",
        key_id: str = "",
    ) -> list[UsageSum]:
        dims = check_dimensions(by)
        segments = cover(_aware(start), _aware(end))
        if not segments:
            return []
        p = self._usage_params()
        sql = groups_sql(group_columns(dims), segments, p, project, key_id)
        rows = await self._usage_fetch(sql, p.args, "sum usage")
        by_path = any(d in ("project", "team", "org") for d in dims)
        return regroup(dims, rows, await self._tenant_names() if by_path else None)

    async def _tenant_names(self) -> dict[str, str]:
        """Tenant id → its path now, or its last (a removed level's)."""
        rows = await self._usage_fetch(NAMES_SQL, [], "read the names of the tenants")
        return {r["id"]: r["path"] for r in rows}

    async def usage_series(
        self, start: datetime, end: datetime, step_s: int, project: str = "", key_id: str = ""
    ) -> list[int]:
        windows = series_windows(_aware(start), _aware(end), step_s)
        counts = [0] * len(windows)
        step = timedelta(seconds=step_s)
        # Whole windows (all but perhaps the first and last) are whole buckets:
        # one query over the sums. A partial one is summed like any period.
        whole = [i for i, (lo, hi) in enumerate(windows) if hi - lo == step]
        if whole:
            first, last = whole[0], whole[-1]
            p = self._usage_params()
            where = [
                f"bucket_s = {p(series_bucket_width(step_s))}",
                f"bucket_start >= {p.time(windows[first][0])}",
                f"bucket_start < {p.time(windows[last][1])}",
                *filters(p, project, key_id),
            ]
            sql = (
                "SELECT bucket_start, SUM(requests) AS requests FROM usage_sums"
                f" WHERE {' AND '.join(where)} GROUP BY bucket_start"
            )
            for row in await self._usage_fetch(sql, p.args, "read the usage series"):
                i = first + (self._usage_time(row["bucket_start"]) - windows[first][0]) // step
                counts[i] += int(row["requests"])
        for i, (lo, hi) in enumerate(windows):
            if hi - lo != step:
                total = await self.usage_groups([], lo, hi, project, key_id)
                counts[i] = total[0].requests if total else 0
        return counts

    async def usage_first_at(self, project: str = "", key_id: str = "") -> datetime | None:
        # The first day from the daily sums, then the first row of that day:
        # two indexed reads instead of a scan of every row of a project.
        p = self._usage_params()
        where = [f"bucket_s = {p(BUCKET_WIDTHS_S[0])}", *filters(p, project, key_id)]
        sql = f"SELECT MIN(bucket_start) AS first FROM usage_sums WHERE {' AND '.join(where)}"
        rows = await self._usage_fetch(sql, p.args, "find the first usage")
        if not rows or rows[0]["first"] is None:
            return None
        day = self._usage_time(rows[0]["first"])
        p = self._usage_params()
        where = [
            f"at >= {p.time(day)}",
            f"at < {p.time(day + timedelta(days=1))}",
            *filters(p, project, key_id),
        ]
        sql = f"SELECT MIN(at) AS first FROM usage_rows WHERE {' AND '.join(where)}"
        rows = await self._usage_fetch(sql, p.args, "find the first usage")
        return self._usage_time(rows[0]["first"]) if rows and rows[0]["first"] is not None else day

    async def usage_rows(
        self, start: datetime, end: datetime, project: str = "", key_id: str = ""
    ) -> AsyncIterator[UsageRecord]:
        # Page by (at, id) instead of one long cursor: the store is not held
        # while a slow reader takes its time over a month of rows.
        after: tuple[Any, Any] | None = None
        names = await self._tenant_names()
        while True:
            p = self._usage_params()
            where = [f"at < {p.time(_aware(end))}", *filters(p, project, key_id)]
            if after is None:
                where.append(f"at >= {p.time(_aware(start))}")
            else:
                # Each placeholder its own argument: SQLite's ? cannot be reused.
                at_min, at_after, row_id = p(after[0]), p(after[0]), p(after[1])
                where.append(f"at >= {at_min} AND (at > {at_after} OR id > {row_id})")
            sql = (
                f"SELECT id, {', '.join(ROW_COLUMNS)} FROM usage_rows"
                f" WHERE {' AND '.join(where)} ORDER BY at, id LIMIT {EXPORT_PAGE_ROWS}"
            )
            rows = await self._usage_fetch(sql, p.args, "read usage rows")
            for r in rows:
                yield UsageRecord(
                    at=self._usage_time(r["at"]),
                    **({c: r[c] for c in ROW_COLUMNS[1:]} | {"project": project_path(r, names)}),
                )
            if len(rows) < EXPORT_PAGE_ROWS:
                return
            after = (rows[-1]["at"], rows[-1]["id"])
