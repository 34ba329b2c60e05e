"""PostgreSQL: usage rows and their 5-minute, hourly and daily sums."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.usage_query import (
    ROW_COLUMNS,
    SUM_COLUMNS,
    SUM_KEY_COLUMNS,
    Params,
    UsageQueries,
    batch_sums,
)
from gatewayd.store.usage_records import UsageFields

_SUM_ALL = ("bucket_s", "bucket_start", *SUM_KEY_COLUMNS, *SUM_COLUMNS)
_SUM_TYPES = (
    "int",
    "timestamptz",
    *("text",) * 6,
    "int",
    *("bigint",) * 6,
    "float8",
    "float8",
    "bigint",
)
# The rows in one statement, each with its journal id (NULL for rows never
# journaled); a row id already stored is skipped, and RETURNING says which went in.
_ROW_TYPES = (
    "timestamptz",
    *("text",) * 6,
    *("bigint",) * 4,
    "float8",
    "float8",
    "int",
    "text",
    "text",
    "text",
)
_INSERT_ROWS = (
    f"INSERT INTO usage_rows ({', '.join(ROW_COLUMNS)}, row_id) SELECT * FROM unnest("
    + ", ".join(f"${i}::{t}[]" for i, t in enumerate(_ROW_TYPES, start=1))
    + ") ON CONFLICT (row_id) DO NOTHING RETURNING row_id"
)
# The whole batch's sums in one statement; batch_sums gives each key once,
# as ON CONFLICT DO UPDATE may not touch a row twice in one statement.
_UPSERT_SUMS = (
    f"INSERT INTO usage_sums ({', '.join(_SUM_ALL)}) SELECT * FROM unnest("
    + ", ".join(f"${i}::{t}[]" for i, t in enumerate(_SUM_TYPES, start=1))
    + f") ON CONFLICT (bucket_s, bucket_start, {', '.join(SUM_KEY_COLUMNS)}) DO UPDATE SET "
    + ", ".join(f"{c} = usage_sums.{c} + EXCLUDED.{c}" for c in SUM_COLUMNS)
)


class PostgresUsage(UsageQueries):
    """Mixed into PostgresStore; uses its pool and error mapping."""

    def _usage_params(self) -> Params:
        return Params(dollar=True, encode_time=_aware)

    async def _usage_fetch(self, sql: str, args: list[Any], what: str) -> list[Mapping[str, Any]]:
        with self._mapped(what):
            return await self._conn.fetch(sql, *args)

    def _usage_time(self, value: Any) -> datetime:
        return value

    async def record_usage(self, rows: Sequence[UsageFields]) -> int:
        if not rows:
            return 0
        with self._mapped(f"write {len(rows)} usage rows"):
            async with self._conn.acquire() as conn, conn.transaction():
                return await _write_usage(conn, rows)


async def _write_usage(conn, rows: Sequence[UsageFields]) -> int:
    """Insert the rows not stored yet and add them to their sums, inside the caller's
    transaction; the number of rows new. A row id stored by another control plane's
    transaction in flight waits for it, then is skipped: counted once either way."""
    seen: set[str] = set()
    unique = []
    for r in rows:
        row_id = getattr(r, "row_id", "")
        if row_id:
            if row_id in seen:
                continue
            seen.add(row_id)
        unique.append(r)
    records = [
        (
            _aware(r.at),
            r.key_id,
            getattr(r, "project_id", ""),
            r.project,
            r.model,
            r.served_model,
            r.replica,
            r.prompt_tokens,
            r.cached_tokens,
            r.completion_tokens,
            r.cost_micros,
            float(r.latency_ms),
            None if r.ttft_ms is None else float(r.ttft_ms),
            r.status,
            r.profile,
            r.batch_id,
            getattr(r, "row_id", "") or None,
        )
        for r in unique
    ]
    # One round trip for the whole batch, as arrays.
    inserted = await conn.fetch(_INSERT_ROWS, *(list(c) for c in zip(*records, strict=True)))
    went_in = {r["row_id"] for r in inserted}
    new = [r for r in unique if not getattr(r, "row_id", "") or r.row_id in went_in]
    if new:
        columns = [list(c) for c in zip(*batch_sums(new), strict=True)]
        await conn.execute(_UPSERT_SUMS, *columns)
    return len(new)
