"""PostgreSQL: uploaded files, batches, and which of a batch's lines are answered."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gatewayd.store.batch_records import ACTIVE_STATUSES, BatchProgress, BatchRecord, FileRecord
from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.postgres.usage import _write_usage
from gatewayd.store.tenant_sql import PROJECT_PATH
from gatewayd.store.usage_records import UsageFields

_FILE_COLUMNS = "file_id, project_id, key_id, filename, purpose, bytes, created_at, expires_at"
# What a file is read back with: its columns and its project's path now.
_FILE_READ = f"{_FILE_COLUMNS}, {PROJECT_PATH}"
_TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)
# What update_batch writes; counts and file ends move only with progress.
_STATE_COLUMNS = (
    "status",
    "output_file_id",
    "error_file_id",
    *_TIMES,
    "total",
    "metadata",
    "errors",
    "models",
)
_BATCH_COLUMNS = (
    "batch_id",
    "project_id",
    "key_id",
    "endpoint",
    "input_file_id",
    "completion_window",
    "created_at",
    "expires_at",
    "completed",
    "failed",
    "output_bytes",
    "error_bytes",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    *_STATE_COLUMNS,
)
# A batch is read back with its project's path now.
_BATCH_SELECT = f"SELECT {', '.join(_BATCH_COLUMNS)}, {PROJECT_PATH} FROM batches"


def _value(rec: BatchRecord, column: str):
    value = getattr(rec, column)
    return _aware(value) if isinstance(value, datetime) else value


class PostgresBatches:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    # ---- files -------------------------------------------------------------

    async def put_file(self, rec: FileRecord) -> None:
        with self._mapped(f"save file {rec.file_id}"):
            await self._conn.execute(
                f"INSERT INTO files ({_FILE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                " ON CONFLICT (file_id) DO UPDATE SET bytes = EXCLUDED.bytes,"
                " expires_at = EXCLUDED.expires_at",
                rec.file_id,
                rec.project_id,
                rec.key_id,
                rec.filename,
                rec.purpose,
                rec.bytes,
                _aware(rec.created_at),
                _aware(rec.expires_at),
            )

    async def get_file(self, file_id: str) -> FileRecord | None:
        with self._mapped(f"read file {file_id}"):
            row = await self._conn.fetchrow(
                f"SELECT {_FILE_READ} FROM files WHERE file_id = $1", file_id
            )
        return None if row is None else FileRecord(**dict(row))

    async def list_files(
        self,
        project_id: str,
        *,
        purpose: str = "",
        after: str = "",
        limit: int = 10_000,
        ascending: bool = False,
    ) -> list[FileRecord]:
        sql, args = f"SELECT {_FILE_READ} FROM files WHERE project_id = $1", [project_id]
        if purpose:
            args.append(purpose)
            sql += f" AND purpose = ${len(args)}"
        if after:
            args.append(after)
            sql += f' AND file_id COLLATE "C" {">" if ascending else "<"} ${len(args)}'
        args.append(limit)
        sql += f' ORDER BY file_id COLLATE "C" {"ASC" if ascending else "DESC"} LIMIT ${len(args)}'
        with self._mapped("list files"):
            rows = await self._conn.fetch(sql, *args)
        return [FileRecord(**dict(r)) for r in rows]

    async def delete_file(self, file_id: str) -> bool:
        with self._mapped(f"remove file {file_id}"):
            done = await self._conn.execute("DELETE FROM files WHERE file_id = $1", file_id)
        return done.endswith(" 1")

    async def expired_files(self, now: datetime, limit: int = 1000) -> list[FileRecord]:
        with self._mapped("list expired files"):
            rows = await self._conn.fetch(
                f"SELECT {_FILE_READ} FROM files WHERE expires_at IS NOT NULL"
                " AND expires_at <= $1 ORDER BY expires_at LIMIT $2",
                _aware(now),
                limit,
            )
        return [FileRecord(**dict(r)) for r in rows]

    async def project_file_bytes(self, project_id: str) -> int:
        with self._mapped(f"sum the files of {project_id}"):
            n = await self._conn.fetchval(
                "SELECT COALESCE(SUM(bytes), 0) FROM files WHERE project_id = $1", project_id
            )
        return int(n)

    # ---- batches -----------------------------------------------------------

    async def create_batch(self, rec: BatchRecord) -> None:
        marks = ", ".join(f"${i}" for i in range(1, len(_BATCH_COLUMNS) + 1))
        with self._mapped(f"save batch {rec.batch_id}"):
            await self._conn.execute(
                f"INSERT INTO batches ({', '.join(_BATCH_COLUMNS)}) VALUES ({marks})",
                *(_value(rec, c) for c in _BATCH_COLUMNS),
            )

    async def update_batch(self, rec: BatchRecord) -> None:
        sets = ", ".join(f"{c} = ${i}" for i, c in enumerate(_STATE_COLUMNS, start=1))
        with self._mapped(f"save batch {rec.batch_id}"):
            await self._conn.execute(
                f"UPDATE batches SET {sets} WHERE batch_id = ${len(_STATE_COLUMNS) + 1}",
                *(_value(rec, c) for c in _STATE_COLUMNS),
                rec.batch_id,
            )

    async def get_batch(self, batch_id: str) -> BatchRecord | None:
        with self._mapped(f"read batch {batch_id}"):
            row = await self._conn.fetchrow(_BATCH_SELECT + " WHERE batch_id = $1", batch_id)
        return None if row is None else BatchRecord(**dict(row))

    async def list_batches(
        self, project_id: str = "", *, status: str = "", after: str = "", limit: int = 100
    ) -> list[BatchRecord]:
        where, args = [], []
        for column, value, op in (
            ("project_id", project_id, "="),
            ("status", status, "="),
            ('batch_id COLLATE "C"', after, "<"),
        ):
            if value:
                args.append(value)
                where.append(f"{column} {op} ${len(args)}")
        sql = _BATCH_SELECT + (" WHERE " + " AND ".join(where) if where else "")
        args.append(limit)
        with self._mapped("list batches"):
            rows = await self._conn.fetch(
                sql + f' ORDER BY batch_id COLLATE "C" DESC LIMIT ${len(args)}', *args
            )
        return [BatchRecord(**dict(r)) for r in rows]

    async def active_batches(self) -> list[BatchRecord]:
        with self._mapped("list the batches still running"):
            rows = await self._conn.fetch(
                _BATCH_SELECT + ' WHERE status = ANY($1::text[]) ORDER BY batch_id COLLATE "C"',
                list(ACTIVE_STATUSES),
            )
        return [BatchRecord(**dict(r)) for r in rows]

    async def batch_done_lines(self, batch_id: str) -> set[int]:
        with self._mapped(f"read the answered lines of batch {batch_id}"):
            rows = await self._conn.fetch(
                "SELECT line FROM batch_done WHERE batch_id = $1", batch_id
            )
        return {r["line"] for r in rows}

    async def record_batch_progress(
        self, progress: BatchProgress, usage: Sequence[UsageFields]
    ) -> None:
        p = progress
        with self._mapped(f"record the progress of batch {p.batch_id}"):
            async with self._conn.acquire() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO batch_done (batch_id, line) SELECT $1, unnest($2::bigint[])",
                    p.batch_id,
                    p.lines,
                )
                await conn.execute(
                    "UPDATE batches SET completed = completed + $1, failed = failed + $2,"
                    " output_bytes = $3, error_bytes = $4, prompt_tokens = prompt_tokens + $5,"
                    " cached_tokens = cached_tokens + $6,"
                    " completion_tokens = completion_tokens + $7 WHERE batch_id = $8",
                    p.completed,
                    p.failed,
                    p.output_bytes,
                    p.error_bytes,
                    p.prompt_tokens,
                    p.cached_tokens,
                    p.completion_tokens,
                    p.batch_id,
                )
                if usage:
                    await _write_usage(conn, usage)
