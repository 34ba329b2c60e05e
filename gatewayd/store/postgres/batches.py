"""PostgreSQL: uploaded files, batches, and which of a batch's lines are answered."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gatewayd.store.batch_records import (
    ACTIVE_STATUSES,
    CHUNK_BYTES,
    BatchMoved,
    BatchProgress,
    BatchRecord,
    FileRecord,
)
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
    "cancel_requested_at",
    "input_bytes",
    *_STATE_COLUMNS,
)
# A batch is read back with its project's path now.
_BATCH_SELECT = f"SELECT {', '.join(_BATCH_COLUMNS)}, {PROJECT_PATH} FROM batches"


def _value(rec: BatchRecord, column: str):
    value = getattr(rec, column)
    return _aware(value) if isinstance(value, datetime) else value


# A file's bytes are still wanted while it is recorded, being uploaded, or read
# or written by a batch not yet at an end (an input deleted while its batch runs
# keeps its bytes until the batch ends). ``c`` is the file_chunks row; $1 is
# the active statuses.
_BYTES_UNWANTED = (
    "NOT EXISTS (SELECT 1 FROM files f WHERE f.file_id = c.file_id)"
    " AND NOT EXISTS (SELECT 1 FROM file_uploads u WHERE u.file_id = c.file_id)"
    " AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.status = ANY($1::text[])"
    " AND (b.input_file_id = c.file_id"
    " OR 'file-' || substr(b.batch_id, 7) || '-output' = c.file_id"
    " OR 'file-' || substr(b.batch_id, 7) || '-error' = c.file_id))"
)


def _output_id(batch_id: str, kind: str) -> str:
    # As gatewayd.batches.objects.output_file_id names it (the store imports nothing above it).
    return f"file-{batch_id.removeprefix('batch_')}-{kind}"


def _pieces(file_id: str, at: int, data: bytes) -> list[tuple[str, int, bytes]]:
    """``data`` as chunk rows of at most CHUNK_BYTES, from offset ``at``."""
    return [(file_id, at + i, data[i : i + CHUNK_BYTES]) for i in range(0, len(data), CHUNK_BYTES)]


_PUT_CHUNKS = "INSERT INTO file_chunks (file_id, at, data) VALUES ($1, $2, $3)"


def _file_row(rec: FileRecord) -> tuple:
    """A file's values in _FILE_COLUMNS' order."""
    return (
        rec.file_id,
        rec.project_id,
        rec.key_id,
        rec.filename,
        rec.purpose,
        rec.bytes,
        _aware(rec.created_at),
        _aware(rec.expires_at),
    )


class PostgresBatches:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    # ---- files -------------------------------------------------------------

    async def put_file(self, rec: FileRecord) -> None:
        with self._mapped(f"save file {rec.file_id}"):
            await self._conn.execute(
                f"INSERT INTO files ({_FILE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                " ON CONFLICT (file_id) DO UPDATE SET bytes = EXCLUDED.bytes,"
                " expires_at = EXCLUDED.expires_at",
                *_file_row(rec),
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
            async with self._conn.acquire() as conn, conn.transaction():
                done = await conn.execute("DELETE FROM files WHERE file_id = $1", file_id)
                await conn.execute(
                    f"DELETE FROM file_chunks AS c WHERE c.file_id = $2 AND {_BYTES_UNWANTED}",
                    list(ACTIVE_STATUSES),
                    file_id,
                )
        return done.endswith(" 1")

    # ---- files' bytes ------------------------------------------------------

    async def begin_upload(self, file_id: str, now: datetime) -> None:
        with self._mapped(f"begin the upload {file_id}"):
            await self._conn.execute(
                "INSERT INTO file_uploads (file_id, started_at) VALUES ($1, $2)",
                file_id,
                _aware(now),
            )

    async def put_file_chunk(self, file_id: str, at: int, data: bytes) -> None:
        with self._mapped(f"write the bytes of file {file_id}"):
            await self._conn.executemany(_PUT_CHUNKS, _pieces(file_id, at, data))

    async def finish_upload(self, rec: FileRecord) -> None:
        with self._mapped(f"save file {rec.file_id}"):
            async with self._conn.acquire() as conn, conn.transaction():
                await conn.execute(
                    f"INSERT INTO files ({_FILE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    *_file_row(rec),
                )
                await conn.execute("DELETE FROM file_uploads WHERE file_id = $1", rec.file_id)

    async def abort_upload(self, file_id: str) -> None:
        with self._mapped(f"drop the upload {file_id}"):
            async with self._conn.acquire() as conn, conn.transaction():
                await conn.execute("DELETE FROM file_chunks WHERE file_id = $1", file_id)
                await conn.execute("DELETE FROM file_uploads WHERE file_id = $1", file_id)

    async def file_chunks(
        self, file_id: str, start: int = 0, window: int = CHUNK_BYTES
    ) -> list[tuple[int, bytes]]:
        with self._mapped(f"read the bytes of file {file_id}"):
            rows = await self._conn.fetch(
                "SELECT at, data FROM file_chunks WHERE file_id = $1 AND at >= $2 AND at < $3"
                " ORDER BY at",
                file_id,
                start,
                start + max(window, 1),
            )
        return [(r["at"], bytes(r["data"])) for r in rows]

    async def drop_file_bytes(self, file_id: str) -> int:
        with self._mapped(f"drop the bytes of file {file_id}"):
            done = await self._conn.execute(
                f"DELETE FROM file_chunks AS c WHERE c.file_id = $2 AND {_BYTES_UNWANTED}",
                list(ACTIVE_STATUSES),
                file_id,
            )
        return int(done.split()[-1])

    async def sweep_file_bytes(self, stale_before: datetime) -> int:
        with self._mapped("drop the bytes no file wants"):
            async with self._conn.acquire() as conn, conn.transaction():
                await conn.execute(
                    "DELETE FROM file_uploads WHERE started_at < $1", _aware(stale_before)
                )
                done = await conn.execute(
                    "DELETE FROM file_chunks WHERE file_id IN (SELECT DISTINCT c.file_id"
                    f" FROM file_chunks AS c WHERE {_BYTES_UNWANTED})",
                    list(ACTIVE_STATUSES),
                )
        return int(done.split()[-1])

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

    async def batch_done_lines(
        self, batch_id: str, start: int = 0, end: int | None = None
    ) -> set[int]:
        with self._mapped(f"read the answered lines of batch {batch_id}"):
            rows = await self._conn.fetch(
                "SELECT line FROM batch_done WHERE batch_id = $1 AND line >= $2"
                " AND ($3::bigint IS NULL OR line < $3)",
                batch_id,
                start,
                end,
            )
        return {r["line"] for r in rows}

    async def request_batch_cancel(self, batch_id: str, at: datetime) -> bool:
        with self._mapped(f"cancel batch {batch_id}"):
            done = await self._conn.execute(
                "UPDATE batches SET cancel_requested_at = $2 WHERE batch_id = $1"
                " AND status IN ('validating', 'in_progress') AND cancel_requested_at IS NULL",
                batch_id,
                _aware(at),
            )
        return done.endswith(" 1")

    async def project_batch_load(self, project_id: str) -> tuple[int, int]:
        with self._mapped(f"count the batches of {project_id}"):
            row = await self._conn.fetchrow(
                "SELECT COUNT(*) AS n, COALESCE(SUM(input_bytes), 0) AS b FROM batches"
                " WHERE project_id = $1 AND status = ANY($2::text[])",
                project_id,
                list(ACTIVE_STATUSES),
            )
        return int(row["n"]), int(row["b"])

    async def record_batch_progress(
        self, progress: BatchProgress, usage: Sequence[UsageFields]
    ) -> None:
        p = progress
        guarded = p.from_output_bytes is not None and p.from_error_bytes is not None
        with self._mapped(f"record the progress of batch {p.batch_id}"):
            async with self._conn.acquire() as conn, conn.transaction():
                # First, so that a run that lost the batch to another waits on the row's
                # lock and then finds the ends moved, before it writes anything.
                done = await conn.execute(
                    "UPDATE batches SET completed = completed + $1, failed = failed + $2,"
                    " output_bytes = $3, error_bytes = $4, prompt_tokens = prompt_tokens + $5,"
                    " cached_tokens = cached_tokens + $6,"
                    " completion_tokens = completion_tokens + $7 WHERE batch_id = $8"
                    " AND ($9::bigint IS NULL OR output_bytes = $9)"
                    " AND ($10::bigint IS NULL OR error_bytes = $10)",
                    p.completed,
                    p.failed,
                    p.output_bytes,
                    p.error_bytes,
                    p.prompt_tokens,
                    p.cached_tokens,
                    p.completion_tokens,
                    p.batch_id,
                    p.from_output_bytes,
                    p.from_error_bytes,
                )
                if guarded and not done.endswith(" 1"):
                    raise BatchMoved(
                        f"batch {p.batch_id} was taken forward by another run",
                        hint="it is read again from the store",
                    )
                await conn.execute(
                    "INSERT INTO batch_done (batch_id, line) SELECT $1, unnest($2::bigint[])",
                    p.batch_id,
                    p.lines,
                )
                pieces = [
                    *_pieces(
                        _output_id(p.batch_id, "output"), p.output_bytes - len(p.output), p.output
                    ),
                    *_pieces(
                        _output_id(p.batch_id, "error"), p.error_bytes - len(p.error), p.error
                    ),
                ]
                if pieces:
                    await conn.executemany(_PUT_CHUNKS, pieces)
                if usage:
                    await _write_usage(conn, usage)
