"""SQLite: usage rows and their 5-minute, hourly and daily sums."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gatewayd.store.sqlite.codec import _from_text, _to_text
from gatewayd.store.usage_query import (
    ROW_COLUMNS,
    SUM_COLUMNS,
    SUM_KEY_COLUMNS,
    Params,
    UsageQueries,
    batch_sums,
)
from gatewayd.store.usage_records import UsageFields

# row_id: the journal's id of the row (NULL for rows never journaled, which
# a unique index lets be many); a row id already stored is not written again.
_INSERT_ROWS = (
    f"INSERT INTO usage_rows ({', '.join(ROW_COLUMNS)}, row_id)"
    f" VALUES ({', '.join('?' * (len(ROW_COLUMNS) + 1))})"
)
# Row ids looked up per query: well under SQLite's bound on parameters.
_IDS_PER_QUERY = 500
_SUM_ALL = ("bucket_s", "bucket_start", *SUM_KEY_COLUMNS, *SUM_COLUMNS)
_UPSERT_SUMS = (
    f"INSERT INTO usage_sums ({', '.join(_SUM_ALL)}) VALUES ({', '.join('?' * len(_SUM_ALL))})"
    f" ON CONFLICT (bucket_s, bucket_start, {', '.join(SUM_KEY_COLUMNS)}) DO UPDATE SET "
    + ", ".join(f"{c} = usage_sums.{c} + excluded.{c}" for c in SUM_COLUMNS)
)


class SqliteUsage(UsageQueries):
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    def _usage_params(self) -> Params:
        return Params(dollar=False, encode_time=_to_text)

    async def _usage_fetch(self, sql: str, args: list[Any], what: str) -> list[Mapping[str, Any]]:
        async with self._lock:
            with self._mapped(what):
                async with self._conn.execute(sql, args) as cur:
                    return list(await cur.fetchall())

    def _usage_time(self, value: Any) -> datetime:
        return _from_text(value)

    async def record_usage(self, rows: Sequence[UsageFields]) -> int:
        if not rows:
            return 0
        async with self._lock:
            with self._mapped(f"write {len(rows)} usage rows"):
                async with self._transaction() as db:
                    return await _write_usage(db, rows)


async def _new_rows(db, rows: Sequence[UsageFields]) -> list[UsageFields]:
    """The rows whose id is neither stored already nor earlier in the batch."""
    ids = [r.row_id for r in rows if getattr(r, "row_id", "")]
    if not ids:
        return list(rows)
    stored: set[str] = set()
    for i in range(0, len(ids), _IDS_PER_QUERY):
        part = ids[i : i + _IDS_PER_QUERY]
        sql = f"SELECT row_id FROM usage_rows WHERE row_id IN ({', '.join('?' * len(part))})"
        async with db.execute(sql, part) as cur:
            stored.update(r[0] for r in await cur.fetchall())
    new = []
    for r in rows:
        row_id = getattr(r, "row_id", "")
        if row_id:
            if row_id in stored:
                continue
            stored.add(row_id)
        new.append(r)
    return new


async def _write_usage(db, rows: Sequence[UsageFields]) -> int:
    """Insert the rows not stored yet and add them to their sums, inside the caller's
    transaction (the store's lock held: no other writer between the look and the write).
    The number of rows new."""
    rows = await _new_rows(db, rows)
    if not rows:
        return 0
    row_params = [
        (
            _to_text(r.at),
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
            r.latency_ms,
            r.ttft_ms,
            r.status,
            r.profile,
            r.batch_id,
            getattr(r, "row_id", "") or None,
        )
        for r in rows
    ]
    sum_params = [(width, _to_text(start), *rest) for width, start, *rest in batch_sums(rows)]
    await db.executemany(_INSERT_ROWS, row_params)
    await db.executemany(_UPSERT_SUMS, sum_params)
    return len(rows)
