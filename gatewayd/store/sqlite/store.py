"""The store on an embedded SQLite file (the default), through aiosqlite.

Datetimes are kept as ISO 8601 text in UTC, JSON as text. One connection
serves the whole daemon; a lock keeps one coroutine's transaction from
swallowing another's statements, since they share that connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite

from gatewayd.store.migrate import Migration, load_migrations, migrations_dir, run_migrations
from gatewayd.store.records import HeartbeatRow, NodeRecord
from gatewayd.store.sqlite.batches import SqliteBatches
from gatewayd.store.sqlite.catalog import SqliteCatalog
from gatewayd.store.sqlite.cluster import SqliteCluster
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text
from gatewayd.store.sqlite.counters import SqliteCounters
from gatewayd.store.sqlite.keys import SqliteKeys
from gatewayd.store.sqlite.mcp import SqliteMcp
from gatewayd.store.sqlite.mcp_seal_rows import SqliteUnboundSeals
from gatewayd.store.sqlite.responses import SqliteResponses
from gatewayd.store.sqlite.revoked import SqliteRevoked
from gatewayd.store.sqlite.settings import SqliteSettings
from gatewayd.store.sqlite.tenants import SqliteTenants
from gatewayd.store.sqlite.usage import SqliteUsage
from llmgw.errors import StoreError

# 5 s: a second process (llmgw ctl, a backup) may hold the write lock briefly;
# waiting beats failing a heartbeat flush.
BUSY_TIMEOUT_MS = 5000

_NODE_COLUMNS = (
    "node_id, hostname, version, address, state, reason, state_since, cordoned, draining,"
    " host, gpus, installable_engines, registered_at, last_heartbeat_at, heartbeat_seq,"
    " labels, operator_labels"
)

# On re-registration everything is replaced except the operator's overlays
# (cordoned, draining, operator_labels) and the latest heartbeat sample.
_UPSERT = f"""
INSERT INTO nodes ({_NODE_COLUMNS})
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (node_id) DO UPDATE SET
    hostname = excluded.hostname,
    version = excluded.version,
    address = excluded.address,
    state = excluded.state,
    reason = excluded.reason,
    state_since = excluded.state_since,
    host = excluded.host,
    gpus = excluded.gpus,
    installable_engines = excluded.installable_engines,
    registered_at = excluded.registered_at,
    last_heartbeat_at = excluded.last_heartbeat_at,
    heartbeat_seq = excluded.heartbeat_seq,
    labels = excluded.labels
"""


def split_statements(sql: str) -> list[str]:
    """Split a SQL script into statements, using SQLite's own tokenizer.

    Needed because ``executescript`` commits any open transaction first, which
    would break running a migration and recording it in one transaction.
    ``sqlite3.complete_statement`` understands quotes, comments and triggers,
    so a ';' inside them does not split.
    """
    statements: list[str] = []
    buf = ""
    for part in sql.split(";"):
        buf += part + ";"
        if sqlite3.complete_statement(buf):
            statements.append(buf)
            buf = ""
    # Left after the last ';': whitespace, a comment, or a statement missing
    # its ';' (run as is; SQLite accepts that, or reports what is wrong).
    rest = buf.removesuffix(";")
    if rest.strip():
        statements.append(rest)
    return statements


class SqliteStore(
    SqliteCatalog,
    SqliteKeys,
    SqliteTenants,
    SqliteUsage,
    SqliteRevoked,
    SqliteBatches,
    SqliteResponses,
    SqliteMcp,
    SqliteUnboundSeals,
    SqliteCluster,
    SqliteSettings,
    SqliteCounters,
):
    """The store in one SQLite file, in WAL mode."""

    backend = "sqlite"

    def __init__(self, path: Path, *, migrations: list[Migration] | None = None) -> None:
        self.path = Path(path)
        # Tests pass their own migrations; normally the packaged ones are used.
        self._migrations = migrations
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        migrations = self._migrations
        if migrations is None:
            migrations = load_migrations(migrations_dir(self.backend))
        try:
            # 0700: the file names every node and its address.
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise StoreError(
                f"cannot create the folder for the SQLite store {self.path}: {e.strerror}",
                hint="check the data dir's permissions, or set store.dsn to another file",
            ) from e
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves.
            db = await aiosqlite.connect(self.path, isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError(
                f"cannot open the SQLite store {self.path}: {e}",
                hint="check that the path is a file this user may write, or set store.dsn",
            ) from e
        try:
            db.row_factory = sqlite3.Row
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await db.execute("PRAGMA foreign_keys = ON")
            # NORMAL is durable in WAL mode except for the last commits on power loss.
            await db.execute("PRAGMA synchronous = NORMAL")
            self._db = db
            await run_migrations(
                self, migrations, backend=self.backend, driver_errors=(sqlite3.Error,)
            )
        except BaseException as e:
            self._db = None
            await db.close()
            if isinstance(e, sqlite3.Error):
                raise StoreError(
                    f"cannot use the SQLite store {self.path}: {e}",
                    hint="is it a SQLite database file? move it aside to start afresh",
                ) from e
            raise

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    @property
    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("the SQLite store is not open", hint="call open() first")
        return self._db

    @contextlib.contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            raise StoreError(
                f"could not {what} in the SQLite store {self.path}: {e}",
                hint="check free disk space and the file's permissions",
            ) from e

    @contextlib.asynccontextmanager
    async def _transaction(self):
        db = self._conn
        # IMMEDIATE takes the write lock up front, so a concurrent writer
        # waits (busy_timeout) instead of failing half-way through.
        await db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            await db.execute("ROLLBACK")
            raise
        await db.execute("COMMIT")

    # The migration runner's hooks (gatewayd.store.migrate.MigrationTarget).

    async def ensure_migrations_table(self) -> None:
        await self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations"
            " (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )

    async def applied_names(self) -> list[str]:
        async with self._conn.execute("SELECT name FROM schema_migrations ORDER BY name") as cur:
            return [row["name"] for row in await cur.fetchall()]

    async def apply(self, migration: Migration) -> bool:
        async with self._lock, self._transaction() as db:
            async with db.execute(
                "SELECT 1 FROM schema_migrations WHERE name = ?", (migration.name,)
            ) as cur:
                if await cur.fetchone() is not None:
                    return False
            for statement in split_statements(migration.sql):
                await db.execute(statement)
            await db.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                (migration.name, _to_text(datetime.now(UTC))),
            )
            return True

    # The Store interface.

    async def applied_migrations(self) -> list[str]:
        async with self._lock:
            with self._mapped("read the migrations"):
                return await self.applied_names()

    async def upsert_node(self, node: NodeRecord) -> None:
        params = (
            node.node_id,
            node.hostname,
            node.version,
            node.address,
            node.state,
            node.reason,
            _to_text(node.state_since),
            int(node.cordoned),
            int(node.draining),
            _json(node.host),
            _json(node.gpus),
            _json(node.installable_engines),
            _to_text(node.registered_at),
            None if node.last_heartbeat_at is None else _to_text(node.last_heartbeat_at),
            node.heartbeat_seq,
            _json(node.labels),
            _json(node.operator_labels),
        )
        async with self._lock:
            with self._mapped(f"save node {node.node_id}"):
                await self._conn.execute(_UPSERT, params)

    async def get_node(self, node_id: str) -> NodeRecord | None:
        async with self._lock:
            with self._mapped(f"read node {node_id}"):
                async with self._conn.execute(
                    f"SELECT {_NODE_COLUMNS} FROM nodes WHERE node_id = ?", (node_id,)
                ) as cur:
                    row = await cur.fetchone()
        return None if row is None else _node(row)

    async def list_nodes(self) -> list[NodeRecord]:
        async with self._lock:
            with self._mapped("list nodes"):
                async with self._conn.execute(
                    f"SELECT {_NODE_COLUMNS} FROM nodes ORDER BY node_id"
                ) as cur:
                    rows = await cur.fetchall()
        return [_node(row) for row in rows]

    async def set_node_state(self, node_id: str, state: str, reason: str, since: datetime) -> None:
        """Set a node's state; a node that does not exist is left alone."""
        async with self._lock:
            with self._mapped(f"set the state of node {node_id}"):
                await self._conn.execute(
                    "UPDATE nodes SET state = ?, reason = ?, state_since = ? WHERE node_id = ?",
                    (state, reason, _to_text(since), node_id),
                )

    async def set_node_cordoned(self, node_id: str, cordoned: bool) -> bool:
        async with self._lock:
            with self._mapped(f"cordon node {node_id}"):
                async with self._conn.execute(
                    "UPDATE nodes SET cordoned = ? WHERE node_id = ?", (int(cordoned), node_id)
                ) as cur:
                    return cur.rowcount == 1

    async def set_node_labels(self, node_id: str, labels: dict[str, str]) -> bool:
        async with self._lock:
            with self._mapped(f"label node {node_id}"):
                async with self._conn.execute(
                    "UPDATE nodes SET operator_labels = ? WHERE node_id = ?",
                    (_json(labels), node_id),
                ) as cur:
                    return cur.rowcount == 1

    async def record_heartbeats(self, rows: list[HeartbeatRow]) -> None:
        """Write the batch in one transaction; rows of unknown nodes are dropped."""
        if not rows:
            return
        params = [
            (_to_text(r.at), r.seq, _json(r.sample), r.node_id) for r in _latest_per_node(rows)
        ]
        async with self._lock:
            with self._mapped(f"write {len(params)} heartbeats"):
                async with self._transaction() as db:
                    await db.executemany(
                        "UPDATE nodes SET last_heartbeat_at = ?, heartbeat_seq = ?,"
                        " last_sample = ? WHERE node_id = ?",
                        params,
                    )


def _latest_per_node(rows: list[HeartbeatRow]) -> list[HeartbeatRow]:
    """One row per node: the last one given for it wins."""
    return list({r.node_id: r for r in rows}.values())


def _node(row: sqlite3.Row) -> NodeRecord:
    return NodeRecord(
        node_id=row["node_id"],
        hostname=row["hostname"],
        version=row["version"],
        address=row["address"],
        state=row["state"],
        reason=row["reason"],
        state_since=_from_text(row["state_since"]),
        cordoned=bool(row["cordoned"]),
        draining=bool(row["draining"]),
        host=json.loads(row["host"]),
        gpus=json.loads(row["gpus"]),
        installable_engines=json.loads(row["installable_engines"]),
        registered_at=_from_text(row["registered_at"]),
        last_heartbeat_at=_from_text(row["last_heartbeat_at"]),
        heartbeat_seq=row["heartbeat_seq"],
        labels=json.loads(row["labels"]),
        operator_labels=json.loads(row["operator_labels"]),
    )
