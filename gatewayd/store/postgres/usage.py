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
    *("text",) * 5,
    "int",
    *("bigint",) * 6,
    "float8",
    "float8",
    "bigint",
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

    async def record_usage(self, rows: Sequence[UsageFields]) -> None:
        if not rows:
            return
        with self._mapped(f"write {len(rows)} usage rows"):
            async with self._conn.acquire() as conn, conn.transaction():
                await _write_usage(conn, rows)


async def _write_usage(conn, rows: Sequence[UsageFields]) -> None:
    """Insert the rows and add them to their sums, inside the caller's transaction."""
    records = [
        (
            _aware(r.at),
            r.key_id,
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
        )
        for r in rows
    ]
    columns = [list(c) for c in zip(*batch_sums(rows), strict=True)]
    # COPY: the rows in one round trip, far cheaper than INSERTs.
    await conn.copy_records_to_table("usage_rows", records=records, columns=list(ROW_COLUMNS))
    await conn.execute(_UPSERT_SUMS, *columns)
