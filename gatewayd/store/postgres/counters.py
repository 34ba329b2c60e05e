"""PostgreSQL: the running totals control planes share (budgets and rate limits).

Times are the database's clock, so control planes whose own clocks differ
agree on what "changed since" means. A write is one statement, committed on
its own: a control plane frozen mid-write (SIGSTOP) holds no lock, and the
time it stamps is the time its rows became visible to the others, give or
take the statement's own run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gatewayd.store.counter_records import CounterReading, SharedCounter
from gatewayd.store.postgres.catalog import _aware

_COLUMNS = "writer, scope, kind, period, amount, rate_per_min, updated_at, expires_at"
# One statement for the batch; a run's totals name each (scope, kind, period)
# once, as ON CONFLICT DO UPDATE may not touch a row twice in one statement.
_UPSERT = (
    f"INSERT INTO shared_counters ({_COLUMNS})"
    " SELECT w, s, k, p, a, r, clock_timestamp(), e FROM unnest($1::text[], $2::text[],"
    " $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::timestamptz[])"
    " AS b(w, s, k, p, a, r, e)"
    " ON CONFLICT (writer, scope, kind, period) DO UPDATE SET amount = EXCLUDED.amount,"
    " rate_per_min = EXCLUDED.rate_per_min, updated_at = EXCLUDED.updated_at,"
    " expires_at = EXCLUDED.expires_at"
)


class PostgresCounters:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def publish_counters(self, counters: Sequence[SharedCounter]) -> None:
        if not counters:
            return
        latest = {(c.writer, c.scope, c.kind, c.period): c for c in counters}
        rows = list(latest.values())
        columns = [
            [c.writer for c in rows],
            [c.scope for c in rows],
            [c.kind for c in rows],
            [c.period for c in rows],
            [c.amount for c in rows],
            [c.rate_per_min for c in rows],
            [_aware(c.expires_at) for c in rows],
        ]
        with self._mapped(f"write {len(rows)} shared counters"):
            await self._conn.execute(_UPSERT, *columns)

    async def read_counters(
        self, *, since: datetime | None = None, exclude_writer: str = ""
    ) -> CounterReading:
        # The clock is read in the same statement, before the rows: a row stamped
        # after it is seen on the next read, whose "since" starts before it.
        sql = (
            f"SELECT {_COLUMNS}, n.now FROM (SELECT clock_timestamp() AS now) AS n"
            " LEFT JOIN shared_counters c ON c.writer <> $1"
        )
        args: list = [exclude_writer]
        if since is not None:
            sql += " AND c.updated_at > $2"
            args.append(_aware(since))
        with self._mapped("read the shared counters"):
            rows = await self._conn.fetch(sql, *args)
        now = rows[0]["now"]
        found = [
            SharedCounter(
                writer=r["writer"],
                scope=r["scope"],
                kind=r["kind"],
                period=r["period"],
                amount=r["amount"],
                rate_per_min=r["rate_per_min"],
                updated_at=r["updated_at"],
                expires_at=r["expires_at"],
            )
            for r in rows
            if r["writer"] is not None
        ]
        return CounterReading(found, now)

    async def prune_counters(self) -> int:
        with self._mapped("remove shared counters whose period is over"):
            status = await self._conn.execute(
                "DELETE FROM shared_counters WHERE expires_at <= clock_timestamp()"
            )
        # asyncpg answers "DELETE <n>".
        return int(status.rsplit(" ", 1)[-1])
