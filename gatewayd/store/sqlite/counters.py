"""SQLite: the running totals control planes share (budgets and rate limits).

SQLite is one machine, so the process's clock is the store's clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from gatewayd.store.counter_records import CounterReading, SharedCounter
from gatewayd.store.sqlite.codec import _from_text, _to_text

_COLUMNS = "writer, scope, kind, period, amount, rate_per_min, updated_at, expires_at"
_UPSERT = (
    f"INSERT INTO shared_counters ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (writer, scope, kind, period) DO UPDATE SET amount = excluded.amount,"
    " rate_per_min = excluded.rate_per_min, updated_at = excluded.updated_at,"
    " expires_at = excluded.expires_at"
)


def _counter(row) -> SharedCounter:
    return SharedCounter(
        writer=row["writer"],
        scope=row["scope"],
        kind=row["kind"],
        period=row["period"],
        amount=row["amount"],
        rate_per_min=row["rate_per_min"],
        updated_at=_from_text(row["updated_at"]),
        expires_at=_from_text(row["expires_at"]),
    )


class SqliteCounters:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def publish_counters(self, counters: Sequence[SharedCounter]) -> None:
        if not counters:
            return
        now = _to_text(datetime.now(UTC))
        params = [
            (c.writer, c.scope, c.kind, c.period, c.amount, c.rate_per_min, now)
            + (_to_text(c.expires_at),)
            for c in counters
        ]
        async with self._lock:
            with self._mapped(f"write {len(counters)} shared counters"):
                async with self._transaction() as db:
                    await db.executemany(_UPSERT, params)

    async def read_counters(
        self, *, since: datetime | None = None, exclude_writer: str = ""
    ) -> CounterReading:
        now = datetime.now(UTC)
        sql = f"SELECT {_COLUMNS} FROM shared_counters WHERE writer <> ?"
        args: list = [exclude_writer]
        if since is not None:
            sql += " AND updated_at > ?"
            args.append(_to_text(since))
        async with self._lock:
            with self._mapped("read the shared counters"):
                async with self._conn.execute(sql, args) as cur:
                    rows = await cur.fetchall()
        return CounterReading([_counter(r) for r in rows], now)

    async def prune_counters(self) -> int:
        now = _to_text(datetime.now(UTC))
        async with self._lock:
            with self._mapped("remove shared counters whose period is over"):
                cur = await self._conn.execute(
                    "DELETE FROM shared_counters WHERE expires_at <= ?", (now,)
                )
                return cur.rowcount
