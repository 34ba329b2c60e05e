"""The store on PostgreSQL, through an asyncpg connection pool.

JSON columns are jsonb and datetimes timestamptz, so the database itself can
answer questions about nodes. The DSN may carry a password: it is masked in
every message we write (``mask_dsn``).

The DSN may list several members (PostgreSQL under Patroni): the pool's
connections are made by ``MemberDialer`` (connect.py), always to the member
that takes writes. When the primary changes, the old one's connections die
with it (a statement on one raises ``StoreError``, never hangs past the
timeouts below) and the pool's next connections go to the new primary. A
connection that fails, or is refused a write as read-only, drops every pooled
connection: they all lead to the same server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import asyncpg

from gatewayd.store.migrate import Migration, load_migrations, migrations_dir, run_migrations
from gatewayd.store.postgres.batches import PostgresBatches
from gatewayd.store.postgres.catalog import PostgresCatalog, _aware
from gatewayd.store.postgres.cluster import PostgresCluster
from gatewayd.store.postgres.connect import (
    DIAL_TIMEOUT_S,
    Member,
    MemberDialer,
    NoWritableMember,
    quiet_shielded_releases,
)
from gatewayd.store.postgres.counters import PostgresCounters
from gatewayd.store.postgres.keys import PostgresKeys
from gatewayd.store.postgres.mcp import PostgresMcp
from gatewayd.store.postgres.mcp_seal_rows import PostgresUnboundSeals
from gatewayd.store.postgres.responses import PostgresResponses
from gatewayd.store.postgres.revoked import PostgresRevoked
from gatewayd.store.postgres.settings import PostgresSettings
from gatewayd.store.postgres.tenants import PostgresTenants
from gatewayd.store.postgres.tls import tls_context
from gatewayd.store.postgres.usage import PostgresUsage
from gatewayd.store.records import HeartbeatRow, NodeRecord
from llmgw.aio import within
from llmgw.errors import StoreError

# A small pool: the control plane's writes are batched (heartbeats) or rare
# (registrations, operator commands), and a shared PostgreSQL has a
# connection limit that other services need too.
POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 5
# Each member is dialled for at most DIAL_TIMEOUT_S (connect.py). A statement
# gets 30 s: the control plane's are small, and one sent to a server that
# stopped answering (a frozen process: TCP still acknowledges) fails rather
# than holding its caller until someone notices.
COMMAND_TIMEOUT_S = 30.0
# A migration may rewrite a large table; it runs once, at start.
MIGRATION_TIMEOUT_S = 3600.0
# Closing sends each connection a goodbye; a dead server is not waited on.
CLOSE_TIMEOUT_S = 5.0
# Serializes migrations when several gatewayd start against one database at
# once. Any constant works; this one spells "llmgw".
MIGRATION_LOCK_KEY = 0x6C6C6D6777

# What asyncpg raises when the server or the network fails us. InternalClientError
# too: a connection the server ended while it sat in the pool (a primary shutting
# down sends FATAL to every idle one) can be handed out before asyncpg sees it
# closed, and the next statement on it fails that way.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)
# The failures that say the connection, not the statement, is at fault: lost, ended
# by the server, timed out, or on a member that no longer takes writes. Every pooled
# connection is then replaced at its next use: they lead to the same server.
CONNECTION_FAILURES: tuple[type[BaseException], ...] = (
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.ReadOnlySQLTransactionError,
    OSError,
    TimeoutError,
)

_NODE_COLUMNS = (
    "node_id, hostname, version, address, state, reason, state_since, cordoned, draining,"
    " host, gpus, installable_engines, registered_at, last_heartbeat_at, heartbeat_seq,"
    " labels, operator_labels"
)

# On re-registration everything is replaced except the operator's overlays
# (cordoned, draining, operator_labels) and the latest heartbeat sample.
_UPSERT = f"""
INSERT INTO nodes ({_NODE_COLUMNS})
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
ON CONFLICT (node_id) DO UPDATE SET
    hostname = EXCLUDED.hostname,
    version = EXCLUDED.version,
    address = EXCLUDED.address,
    state = EXCLUDED.state,
    reason = EXCLUDED.reason,
    state_since = EXCLUDED.state_since,
    host = EXCLUDED.host,
    gpus = EXCLUDED.gpus,
    installable_engines = EXCLUDED.installable_engines,
    registered_at = EXCLUDED.registered_at,
    last_heartbeat_at = EXCLUDED.last_heartbeat_at,
    heartbeat_seq = EXCLUDED.heartbeat_seq,
    labels = EXCLUDED.labels
"""

# One statement for the whole batch: atomic on its own, one round trip.
_HEARTBEATS = """
UPDATE nodes AS n
SET last_heartbeat_at = b.at, heartbeat_seq = b.seq, last_sample = b.sample::jsonb
FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::text[]) AS b(node_id, at, seq, sample)
WHERE n.node_id = b.node_id
"""


def _dsn_passwords(dsn: str) -> list[str]:
    """Every password the DSN carries, in the userinfo or as ?password=."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return []
    found = []
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    found += [v for k, v in parse_qsl(parts.query) if k == "password"]
    return [p for p in found if p]


def mask_dsn(dsn: str) -> str:
    """The DSN with its password replaced by ``***``, fit for messages and logs."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<a DSN that cannot be parsed>"
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:***@{hosts}"
    query = parts.query
    if query:
        pairs = [(k, "***" if k == "password" else v) for k, v in parse_qsl(query)]
        query = urlencode(pairs, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(text: str, dsn: str) -> str:
    """``text`` with any password of ``dsn`` in it masked (driver messages may echo it)."""
    for secret in _dsn_passwords(dsn):
        text = text.replace(secret, "***")
    return text


async def _close_pool(pool: asyncpg.Pool) -> None:
    try:
        await within(pool.close(), CLOSE_TIMEOUT_S)
    except (TimeoutError, *DRIVER_ERRORS):
        pool.terminate()


async def _init_connection(conn: asyncpg.Connection) -> None:
    # jsonb in and out as Python values instead of strings.
    await conn.set_type_codec(
        "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog", format="text"
    )


class PostgresStore(
    PostgresCatalog,
    PostgresKeys,
    PostgresTenants,
    PostgresUsage,
    PostgresRevoked,
    PostgresBatches,
    PostgresResponses,
    PostgresMcp,
    PostgresUnboundSeals,
    PostgresCluster,
    PostgresSettings,
    PostgresCounters,
):
    """The store in a PostgreSQL database."""

    backend = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        migrations: list[Migration] | None = None,
        cluster_ca: Path | None = None,
    ) -> None:
        self.dsn = dsn
        # Checked against, beside the system's and the DSN's authorities, when TLS is asked.
        self.cluster_ca = cluster_ca
        # Tests pass their own migrations; normally the packaged ones are used.
        self._migrations = migrations
        self._pool: asyncpg.Pool | None = None
        self._dialer: MemberDialer | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({mask_dsn(self.dsn)!r})"

    async def open(self) -> None:
        migrations = self._migrations
        if migrations is None:
            migrations = load_migrations(migrations_dir(self.backend))
        try:
            quiet_shielded_releases(asyncio.get_running_loop())
            self._dialer = MemberDialer(self.dsn, tls=tls_context(self.dsn, self.cluster_ca))
            pool = await asyncpg.create_pool(
                self.dsn,
                min_size=POOL_MIN_SIZE,
                max_size=POOL_MAX_SIZE,
                connect=self._dialer,
                command_timeout=COMMAND_TIMEOUT_S,
                init=_init_connection,
                server_settings={"application_name": "llmgw-gatewayd"},
            )
        except (*DRIVER_ERRORS, ValueError) as e:
            raise self._open_error(e) from e
        self._pool = pool
        try:
            await run_migrations(
                self, migrations, backend=self.backend, driver_errors=DRIVER_ERRORS
            )
        except BaseException as e:
            self._pool = None
            await _close_pool(pool)
            if isinstance(e, DRIVER_ERRORS):
                raise self._open_error(e) from e
            raise

    def _open_error(self, e: BaseException) -> StoreError:
        where = mask_dsn(self.dsn)
        detail = scrub(str(e) or type(e).__name__, self.dsn)
        fix = "check store.dsn (or the file store.dsn_file names)"
        if isinstance(
            e, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
        ):
            return StoreError(
                f"PostgreSQL at {where} refused the login: {detail}",
                hint=f"check the user and password; {fix}",
            )
        if isinstance(e, asyncpg.InvalidCatalogNameError):
            return StoreError(
                f"PostgreSQL at {where}: {detail}",
                hint=f"create the database first (createdb NAME), or {fix}",
            )
        if isinstance(e, TimeoutError):
            return StoreError(
                f"PostgreSQL at {where} did not answer within {DIAL_TIMEOUT_S:.0f} s",
                hint=f"is the host right and the port open to this machine? {fix}",
            )
        if isinstance(e, NoWritableMember):
            return StoreError(
                f"PostgreSQL at {where}: {detail}",
                hint="while a primary is being elected none takes writes (Patroni: up to its"
                f" ttl; `patronictl list` says who leads); otherwise {fix}",
            )
        if isinstance(e, OSError):
            return StoreError(
                f"cannot reach PostgreSQL at {where}: {detail}",
                hint=f"is PostgreSQL running and listening on that host and port? {fix}",
            )
        if isinstance(e, ValueError):
            return StoreError(
                f"store.dsn {where} is not a valid PostgreSQL DSN: {detail}",
                hint="write it as postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE",
            )
        return StoreError(f"cannot use PostgreSQL at {where}: {detail}", hint=fix)

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await _close_pool(pool)

    @property
    def member(self) -> Member | None:
        """The member the store last connected to for writes (None before, or without a host)."""
        return self._dialer.last_member if self._dialer is not None else None

    def _drop_connections(self) -> None:
        """Replace every pooled connection at its next use (they reach a server that
        failed one of them, or no longer takes writes); statements running finish first."""
        if self._pool is not None:
            # What Pool.expire_connections() does, done now: as a task it could run
            # after the next acquire had already handed out a stale connection.
            # (Pool has __slots__: a renamed attribute fails loudly, never silently.)
            self._pool._generation += 1

    @property
    def _conn(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open", hint="call open() first")
        return self._pool

    @contextlib.contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        try:
            yield
        except DRIVER_ERRORS as e:
            if isinstance(e, CONNECTION_FAILURES):
                self._drop_connections()
            raise StoreError(
                f"could not {what} in PostgreSQL at {mask_dsn(self.dsn)}: {scrub(str(e), self.dsn)}",
                hint="check that PostgreSQL is up and reachable; gatewayd retries on the next write",
            ) from e

    # The migration runner's hooks (gatewayd.store.migrate.MigrationTarget).

    async def ensure_migrations_table(self) -> None:
        async with self._conn.acquire() as conn, conn.transaction():
            # Under the lock: two CREATE TABLE IF NOT EXISTS racing can still collide.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )

    async def applied_names(self) -> list[str]:
        rows = await self._conn.fetch(
            'SELECT name FROM schema_migrations ORDER BY name COLLATE "C"'
        )
        return [row["name"] for row in rows]

    async def apply(self, migration: Migration) -> bool:
        async with self._conn.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
            if await conn.fetchval(
                "SELECT true FROM schema_migrations WHERE name = $1", migration.name
            ):
                return False
            # No arguments: asyncpg sends it as a simple query, so a file may
            # hold several statements.
            await conn.execute(migration.sql, timeout=MIGRATION_TIMEOUT_S)
            await conn.execute("INSERT INTO schema_migrations (name) VALUES ($1)", migration.name)
            return True

    # The Store interface.

    async def applied_migrations(self) -> list[str]:
        with self._mapped("read the migrations"):
            return await self.applied_names()

    async def upsert_node(self, node: NodeRecord) -> None:
        with self._mapped(f"save node {node.node_id}"):
            await self._conn.execute(
                _UPSERT,
                node.node_id,
                node.hostname,
                node.version,
                node.address,
                node.state,
                node.reason,
                _aware(node.state_since),
                node.cordoned,
                node.draining,
                node.host,
                node.gpus,
                node.installable_engines,
                _aware(node.registered_at),
                _aware(node.last_heartbeat_at),
                node.heartbeat_seq,
                node.labels,
                node.operator_labels,
            )

    async def get_node(self, node_id: str) -> NodeRecord | None:
        with self._mapped(f"read node {node_id}"):
            row = await self._conn.fetchrow(
                f"SELECT {_NODE_COLUMNS} FROM nodes WHERE node_id = $1", node_id
            )
        return None if row is None else NodeRecord(**dict(row))

    async def list_nodes(self) -> list[NodeRecord]:
        with self._mapped("list nodes"):
            # COLLATE "C": byte order, as SQLite sorts, whatever the database's locale.
            rows = await self._conn.fetch(
                f'SELECT {_NODE_COLUMNS} FROM nodes ORDER BY node_id COLLATE "C"'
            )
        return [NodeRecord(**dict(row)) for row in rows]

    async def set_node_state(self, node_id: str, state: str, reason: str, since: datetime) -> None:
        """Set a node's state; a node that does not exist is left alone."""
        with self._mapped(f"set the state of node {node_id}"):
            await self._conn.execute(
                "UPDATE nodes SET state = $2, reason = $3, state_since = $4 WHERE node_id = $1",
                node_id,
                state,
                reason,
                _aware(since),
            )

    async def set_node_cordoned(self, node_id: str, cordoned: bool) -> bool:
        with self._mapped(f"cordon node {node_id}"):
            found = await self._conn.fetchval(
                "UPDATE nodes SET cordoned = $2 WHERE node_id = $1 RETURNING true",
                node_id,
                cordoned,
            )
        return bool(found)

    async def set_node_labels(self, node_id: str, labels: dict[str, str]) -> bool:
        with self._mapped(f"label node {node_id}"):
            found = await self._conn.fetchval(
                "UPDATE nodes SET operator_labels = $2 WHERE node_id = $1 RETURNING true",
                node_id,
                labels,
            )
        return bool(found)

    async def record_heartbeats(self, rows: list[HeartbeatRow]) -> None:
        """Write the batch in one statement; rows of unknown nodes are dropped."""
        if not rows:
            return
        # One row per node, the last given wins: UPDATE … FROM with two
        # matches for a node would pick either.
        latest = list({r.node_id: r for r in rows}.values())
        columns: list[list[Any]] = [
            [r.node_id for r in latest],
            [_aware(r.at) for r in latest],
            [r.seq for r in latest],
            [json.dumps(r.sample) for r in latest],
        ]
        with self._mapped(f"write {len(latest)} heartbeats"):
            await self._conn.execute(_HEARTBEATS, *columns)
