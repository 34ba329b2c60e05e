"""SQLite: uploaded files, batches, and which of a batch's lines are answered."""

from __future__ import annotations

import json
import sqlite3
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
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text
from gatewayd.store.sqlite.usage import _write_usage
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
# What a batch is read back with: its columns and its project's path now.
_BATCH_READ = f"{', '.join(_BATCH_COLUMNS)}, {PROJECT_PATH}"


def _output_id(batch_id: str, kind: str) -> str:
    # As gatewayd.batches.objects.output_file_id names it (the store imports nothing above it).
    return f"file-{batch_id.removeprefix('batch_')}-{kind}"


def _opt(dt: datetime | None) -> str | None:
    return None if dt is None else _to_text(dt)


def _file(row: sqlite3.Row) -> FileRecord:
    return FileRecord(
        file_id=row["file_id"],
        project_id=row["project_id"],
        project=row["project"],
        key_id=row["key_id"],
        filename=row["filename"],
        purpose=row["purpose"],
        bytes=row["bytes"],
        created_at=_from_text(row["created_at"]),
        expires_at=_from_text(row["expires_at"]),
    )


def _batch_value(rec: BatchRecord, column: str):
    value = getattr(rec, column)
    if column in ("metadata", "errors", "models"):
        return _json(value)
    if isinstance(value, datetime) or column in _TIMES:
        return _opt(value)
    return value


# A file's bytes are still wanted while it is recorded, being uploaded, or read
# or written by a batch not yet at an end (an input deleted while its batch runs
# keeps its bytes until the batch ends). ``c`` is the file_chunks row.
_ACTIVE_MARKS = ", ".join("?" * len(ACTIVE_STATUSES))
_BYTES_UNWANTED = (
    "NOT EXISTS (SELECT 1 FROM files f WHERE f.file_id = c.file_id)"
    " AND NOT EXISTS (SELECT 1 FROM file_uploads u WHERE u.file_id = c.file_id)"
    " AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.status IN"
    f" ({_ACTIVE_MARKS}) AND (b.input_file_id = c.file_id"
    " OR 'file-' || substr(b.batch_id, 7) || '-output' = c.file_id"
    " OR 'file-' || substr(b.batch_id, 7) || '-error' = c.file_id))"
)


def _pieces(file_id: str, at: int, data: bytes) -> list[tuple[str, int, bytes]]:
    """``data`` as chunk rows of at most CHUNK_BYTES, from offset ``at``."""
    return [
        (file_id, at + i, data[i : i + CHUNK_BYTES]) for i in range(0, len(data), CHUNK_BYTES)
    ]


def _batch(row: sqlite3.Row) -> BatchRecord:
    values = {c: row[c] for c in _BATCH_COLUMNS} | {"project": row["project"]}
    for c in ("metadata", "errors", "models"):
        values[c] = json.loads(values[c])
    for c in ("created_at", "expires_at", "cancel_requested_at", *_TIMES):
        values[c] = _from_text(values[c])
    return BatchRecord(**values)


class SqliteBatches:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    # ---- files -------------------------------------------------------------

    async def put_file(self, rec: FileRecord) -> None:
        async with self._lock:
            with self._mapped(f"save file {rec.file_id}"):
                await self._conn.execute(
                    f"INSERT INTO files ({_FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (file_id) DO UPDATE SET bytes = excluded.bytes,"
                    " expires_at = excluded.expires_at",
                    (
                        rec.file_id,
                        rec.project_id,
                        rec.key_id,
                        rec.filename,
                        rec.purpose,
                        rec.bytes,
                        _to_text(rec.created_at),
                        _opt(rec.expires_at),
                    ),
                )

    async def get_file(self, file_id: str) -> FileRecord | None:
        async with self._lock:
            with self._mapped(f"read file {file_id}"):
                async with self._conn.execute(
                    f"SELECT {_FILE_READ} FROM files WHERE file_id = ?", (file_id,)
                ) as cur:
                    row = await cur.fetchone()
        return None if row is None else _file(row)

    async def list_files(
        self,
        project_id: str,
        *,
        purpose: str = "",
        after: str = "",
        limit: int = 10_000,
        ascending: bool = False,
    ) -> list[FileRecord]:
        sql, args = f"SELECT {_FILE_READ} FROM files WHERE project_id = ?", [project_id]
        if purpose:
            sql, args = sql + " AND purpose = ?", [*args, purpose]
        if after:
            sql, args = (
                sql + (" AND file_id > ?" if ascending else " AND file_id < ?"),
                [
                    *args,
                    after,
                ],
            )
        sql += f" ORDER BY file_id {'ASC' if ascending else 'DESC'} LIMIT ?"
        async with self._lock:
            with self._mapped("list files"):
                async with self._conn.execute(sql, [*args, limit]) as cur:
                    rows = await cur.fetchall()
        return [_file(r) for r in rows]

    async def delete_file(self, file_id: str) -> bool:
        async with self._lock:
            with self._mapped(f"remove file {file_id}"):
                async with self._transaction() as db:
                    async with db.execute("DELETE FROM files WHERE file_id = ?", (file_id,)) as cur:
                        gone = cur.rowcount == 1
                    await db.execute(
                        f"DELETE FROM file_chunks AS c WHERE c.file_id = ? AND {_BYTES_UNWANTED}",
                        (file_id, *ACTIVE_STATUSES),
                    )
                    return gone

    # ---- files' bytes ------------------------------------------------------

    async def begin_upload(self, file_id: str, now: datetime) -> None:
        async with self._lock:
            with self._mapped(f"begin the upload {file_id}"):
                await self._conn.execute(
                    "INSERT INTO file_uploads (file_id, started_at) VALUES (?, ?)",
                    (file_id, _to_text(now)),
                )

    async def put_file_chunk(self, file_id: str, at: int, data: bytes) -> None:
        async with self._lock:
            with self._mapped(f"write the bytes of file {file_id}"):
                await self._conn.executemany(
                    "INSERT INTO file_chunks (file_id, at, data) VALUES (?, ?, ?)",
                    _pieces(file_id, at, data),
                )

    async def finish_upload(self, rec: FileRecord) -> None:
        async with self._lock:
            with self._mapped(f"save file {rec.file_id}"):
                async with self._transaction() as db:
                    await db.execute(
                        f"INSERT INTO files ({_FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            rec.file_id,
                            rec.project_id,
                            rec.key_id,
                            rec.filename,
                            rec.purpose,
                            rec.bytes,
                            _to_text(rec.created_at),
                            _opt(rec.expires_at),
                        ),
                    )
                    await db.execute("DELETE FROM file_uploads WHERE file_id = ?", (rec.file_id,))

    async def abort_upload(self, file_id: str) -> None:
        async with self._lock:
            with self._mapped(f"drop the upload {file_id}"):
                async with self._transaction() as db:
                    await db.execute("DELETE FROM file_chunks WHERE file_id = ?", (file_id,))
                    await db.execute("DELETE FROM file_uploads WHERE file_id = ?", (file_id,))

    async def file_chunks(
        self, file_id: str, start: int = 0, window: int = CHUNK_BYTES
    ) -> list[tuple[int, bytes]]:
        async with self._lock:
            with self._mapped(f"read the bytes of file {file_id}"):
                async with self._conn.execute(
                    "SELECT at, data FROM file_chunks WHERE file_id = ? AND at >= ? AND at < ?"
                    " ORDER BY at",
                    (file_id, start, start + max(window, 1)),
                ) as cur:
                    rows = await cur.fetchall()
        return [(r["at"], bytes(r["data"])) for r in rows]

    async def drop_file_bytes(self, file_id: str) -> int:
        async with self._lock:
            with self._mapped(f"drop the bytes of file {file_id}"):
                async with self._conn.execute(
                    f"DELETE FROM file_chunks AS c WHERE c.file_id = ? AND {_BYTES_UNWANTED}",
                    (file_id, *ACTIVE_STATUSES),
                ) as cur:
                    return max(cur.rowcount, 0)

    async def sweep_file_bytes(self, stale_before: datetime) -> int:
        async with self._lock:
            with self._mapped("drop the bytes no file wants"):
                async with self._transaction() as db:
                    await db.execute(
                        "DELETE FROM file_uploads WHERE started_at < ?", (_to_text(stale_before),)
                    )
                    async with db.execute(
                        "DELETE FROM file_chunks WHERE file_id IN (SELECT DISTINCT c.file_id"
                        f" FROM file_chunks AS c WHERE {_BYTES_UNWANTED})",
                        ACTIVE_STATUSES,
                    ) as cur:
                        return max(cur.rowcount, 0)

    async def expired_files(self, now: datetime, limit: int = 1000) -> list[FileRecord]:
        async with self._lock:
            with self._mapped("list expired files"):
                async with self._conn.execute(
                    f"SELECT {_FILE_READ} FROM files WHERE expires_at IS NOT NULL"
                    " AND expires_at <= ? ORDER BY expires_at LIMIT ?",
                    (_to_text(now), limit),
                ) as cur:
                    rows = await cur.fetchall()
        return [_file(r) for r in rows]

    async def project_file_bytes(self, project_id: str) -> int:
        async with self._lock:
            with self._mapped(f"sum the files of {project_id}"):
                async with self._conn.execute(
                    "SELECT COALESCE(SUM(bytes), 0) AS n FROM files WHERE project_id = ?",
                    (project_id,),
                ) as cur:
                    row = await cur.fetchone()
        return int(row["n"])

    # ---- batches -----------------------------------------------------------

    async def create_batch(self, rec: BatchRecord) -> None:
        columns = ", ".join(_BATCH_COLUMNS)
        marks = ", ".join("?" * len(_BATCH_COLUMNS))
        async with self._lock:
            with self._mapped(f"save batch {rec.batch_id}"):
                await self._conn.execute(
                    f"INSERT INTO batches ({columns}) VALUES ({marks})",
                    [_batch_value(rec, c) for c in _BATCH_COLUMNS],
                )

    async def update_batch(self, rec: BatchRecord) -> None:
        sets = ", ".join(f"{c} = ?" for c in _STATE_COLUMNS)
        async with self._lock:
            with self._mapped(f"save batch {rec.batch_id}"):
                await self._conn.execute(
                    f"UPDATE batches SET {sets} WHERE batch_id = ?",
                    [*(_batch_value(rec, c) for c in _STATE_COLUMNS), rec.batch_id],
                )

    async def get_batch(self, batch_id: str) -> BatchRecord | None:
        async with self._lock:
            with self._mapped(f"read batch {batch_id}"):
                async with self._conn.execute(
                    f"SELECT {_BATCH_READ} FROM batches WHERE batch_id = ?",
                    (batch_id,),
                ) as cur:
                    row = await cur.fetchone()
        return None if row is None else _batch(row)

    async def list_batches(
        self, project_id: str = "", *, status: str = "", after: str = "", limit: int = 100
    ) -> list[BatchRecord]:
        where, args = [], []
        if project_id:
            where, args = [*where, "project_id = ?"], [*args, project_id]
        if status:
            where, args = [*where, "status = ?"], [*args, status]
        if after:
            where, args = [*where, "batch_id < ?"], [*args, after]
        sql = f"SELECT {_BATCH_READ} FROM batches"
        if where:
            sql += " WHERE " + " AND ".join(where)
        async with self._lock:
            with self._mapped("list batches"):
                async with self._conn.execute(
                    sql + " ORDER BY batch_id DESC LIMIT ?", [*args, limit]
                ) as cur:
                    rows = await cur.fetchall()
        return [_batch(r) for r in rows]

    async def active_batches(self) -> list[BatchRecord]:
        marks = ", ".join("?" * len(ACTIVE_STATUSES))
        async with self._lock:
            with self._mapped("list the batches still running"):
                async with self._conn.execute(
                    f"SELECT {_BATCH_READ} FROM batches"
                    f" WHERE status IN ({marks}) ORDER BY batch_id",
                    ACTIVE_STATUSES,
                ) as cur:
                    rows = await cur.fetchall()
        return [_batch(r) for r in rows]

    async def batch_done_lines(
        self, batch_id: str, start: int = 0, end: int | None = None
    ) -> set[int]:
        sql, args = "SELECT line FROM batch_done WHERE batch_id = ? AND line >= ?", [batch_id, start]
        if end is not None:
            sql, args = sql + " AND line < ?", [*args, end]
        async with self._lock:
            with self._mapped(f"read the answered lines of batch {batch_id}"):
                async with self._conn.execute(sql, args) as cur:
                    rows = await cur.fetchall()
        return {r["line"] for r in rows}

    async def request_batch_cancel(self, batch_id: str, at: datetime) -> bool:
        async with self._lock:
            with self._mapped(f"cancel batch {batch_id}"):
                async with self._conn.execute(
                    "UPDATE batches SET cancel_requested_at = ? WHERE batch_id = ?"
                    " AND status IN ('validating', 'in_progress') AND cancel_requested_at IS NULL",
                    (_to_text(at), batch_id),
                ) as cur:
                    return cur.rowcount == 1

    async def project_batch_load(self, project_id: str) -> tuple[int, int]:
        async with self._lock:
            with self._mapped(f"count the batches of {project_id}"):
                async with self._conn.execute(
                    "SELECT COUNT(*) AS n, COALESCE(SUM(input_bytes), 0) AS b FROM batches"
                    f" WHERE project_id = ? AND status IN ({_ACTIVE_MARKS})",
                    (project_id, *ACTIVE_STATUSES),
                ) as cur:
                    row = await cur.fetchone()
        return int(row["n"]), int(row["b"])

    async def record_batch_progress(
        self, progress: BatchProgress, usage: Sequence[UsageFields]
    ) -> None:
        p = progress
        guard, guard_args = "", []
        if p.from_output_bytes is not None and p.from_error_bytes is not None:
            guard, guard_args = " AND output_bytes = ? AND error_bytes = ?", [
                p.from_output_bytes,
                p.from_error_bytes,
            ]
        async with self._lock:
            with self._mapped(f"record the progress of batch {p.batch_id}"):
                async with self._transaction() as db:
                    async with db.execute(
                        "UPDATE batches SET completed = completed + ?, failed = failed + ?,"
                        " output_bytes = ?, error_bytes = ?, prompt_tokens = prompt_tokens + ?,"
                        " cached_tokens = cached_tokens + ?,"
                        " completion_tokens = completion_tokens + ? WHERE batch_id = ?" + guard,
                        (
                            p.completed,
                            p.failed,
                            p.output_bytes,
                            p.error_bytes,
                            p.prompt_tokens,
                            p.cached_tokens,
                            p.completion_tokens,
                            p.batch_id,
                            *guard_args,
                        ),
                    ) as cur:
                        if guard and cur.rowcount != 1:
                            raise BatchMoved(
                                f"batch {p.batch_id} was taken forward by another run",
                                hint="it is read again from the store",
                            )
                    await db.executemany(
                        "INSERT INTO batch_done (batch_id, line) VALUES (?, ?)",
                        [(p.batch_id, line) for line in p.lines],
                    )
                    for kind, data, at in (
                        ("output", p.output, p.output_bytes - len(p.output)),
                        ("error", p.error, p.error_bytes - len(p.error)),
                    ):
                        if data:
                            await db.executemany(
                                "INSERT INTO file_chunks (file_id, at, data) VALUES (?, ?, ?)",
                                _pieces(_output_id(p.batch_id, kind), at, data),
                            )
                    if usage:
                        await _write_usage(db, usage)
