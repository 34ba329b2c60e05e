"""The control-plane store, on SQLite and on a real PostgreSQL alike.

Tests taking ``store`` or ``store_config`` run once per backend
(tests/pg_fixture.py).
"""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import aiosqlite
import asyncpg
import pytest

from gatewayd.store import (
    HeartbeatRow,
    NodeRecord,
    PostgresStore,
    SqliteStore,
    Store,
    connect_store,
    mask_dsn,
    open_store_from_config,
)
from gatewayd.store.migrate import Migration, load_migrations
from llmgw.config import StoreConfig
from llmgw.errors import ConfigError, StoreError
from llmgw.paths import Paths

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
CEST = timezone(timedelta(hours=2))


def _node(node_id: str = "gpu-01", **changes) -> NodeRecord:
    fields = {
        "node_id": node_id,
        "hostname": f"{node_id}.lab",
        "version": "0.1.0",
        "address": "10.0.0.7:7070",
        "state": "ready",
        "reason": "heartbeats arriving",
        "state_since": T0,
        "host": {"os": "Debian 12", "cpu": {"cores": 64}, "note": "ünïcode ✓"},
        "gpus": [{"index": 0, "name": "H100", "memory_total_bytes": 85899345920}],
        "installable_engines": ["llama.cpp", "vllm"],
        "registered_at": T0 - timedelta(minutes=5),
    }
    fields.update(changes)
    return NodeRecord(**fields)


def _with_migrations(cfg: StoreConfig, paths: Paths, migrations: list[Migration]) -> Store:
    """The same store location as ``cfg``, migrated with ``migrations`` instead."""
    plain = open_store_from_config(cfg, paths)
    if isinstance(plain, SqliteStore):
        return SqliteStore(plain.path, migrations=migrations)
    assert isinstance(plain, PostgresStore)
    return PostgresStore(plain.dsn, migrations=migrations)


async def _stored_sample(store: Store, node_id: str) -> dict | None:
    """The latest heartbeat sample as the database holds it, read with the driver."""
    if isinstance(store, SqliteStore):
        async with (
            aiosqlite.connect(store.path) as db,
            db.execute("SELECT last_sample FROM nodes WHERE node_id = ?", (node_id,)) as cur,
        ):
            (text,) = await cur.fetchone()
        return None if text is None else json.loads(text)
    assert isinstance(store, PostgresStore)
    conn = await asyncpg.connect(store.dsn)
    try:
        text = await conn.fetchval(
            "SELECT last_sample::text FROM nodes WHERE node_id = $1", node_id
        )
    finally:
        await conn.close()
    return None if text is None else json.loads(text)


# Migrations


def _packaged(backend: str) -> list[str]:
    from gatewayd.store.migrate import migrations_dir

    return [m.name for m in load_migrations(migrations_dir(backend))]


async def test_opening_a_store_applies_the_migrations_and_records_them(store: Store):
    assert await store.applied_migrations() == _packaged(store.backend)
    assert (await store.applied_migrations())[0] == "0001_nodes"


async def test_opening_a_store_again_does_not_reapply_its_migrations(
    store: Store, store_config: StoreConfig, store_paths: Paths
):
    await store.upsert_node(_node())
    again = await connect_store(store_config, store_paths)
    try:
        assert await again.applied_migrations() == _packaged(store.backend)
        # Reapplying 0001 would have failed on CREATE TABLE or emptied the table.
        assert await again.get_node("gpu-01") is not None
    finally:
        await again.close()


async def test_migrations_are_applied_in_name_order_even_with_gaps(
    store_config: StoreConfig, store_paths: Paths
):
    # 0010 depends on 0003's table: it only works when run after it.
    migrations = [
        Migration("0010_fill", "INSERT INTO t (v) VALUES ('a;b'); -- a ';' in a string\n"),
        Migration("0003_table", "CREATE TABLE t (v TEXT);"),
    ]
    store = _with_migrations(store_config, store_paths, migrations)
    await store.open()
    try:
        assert await store.applied_migrations() == ["0003_table", "0010_fill"]
    finally:
        await store.close()


async def test_a_failing_migration_leaves_nothing_of_itself_behind(
    store_config: StoreConfig, store_paths: Paths
):
    good = Migration("0001_a", "CREATE TABLE a (v TEXT);")
    bad = Migration("0002_b", "CREATE TABLE b (v TEXT);\nINSERT INTO no_such_table VALUES (1);")
    store = _with_migrations(store_config, store_paths, [good, bad])
    with pytest.raises(StoreError, match="migration 0002_b"):
        await store.open()

    # Table b was rolled back with the failed insert: creating it again works.
    fixed = Migration("0002_b", "CREATE TABLE b (v TEXT);")
    store = _with_migrations(store_config, store_paths, [good, fixed])
    await store.open()
    try:
        assert await store.applied_migrations() == ["0001_a", "0002_b"]
    finally:
        await store.close()


def test_migration_files_are_loaded_in_name_order(tmp_path: Path):
    for name in ("0010_c.sql", "0002_b.sql", "0001_a.sql", "README.txt"):
        (tmp_path / name).write_text("SELECT 1;")
    assert [m.name for m in load_migrations(tmp_path)] == ["0001_a", "0002_b", "0010_c"]


def test_a_misnamed_migration_file_is_refused_rather_than_skipped(tmp_path: Path):
    (tmp_path / "add_models.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match="add_models.sql is not named NNNN_name.sql"):
        load_migrations(tmp_path)


def test_the_packaged_migrations_exist_for_both_backends():
    from gatewayd.store.migrate import migrations_dir

    for backend in ("sqlite", "postgres"):
        names = [m.name for m in load_migrations(migrations_dir(backend))]
        assert names[0] == "0001_nodes"


# Nodes


async def test_a_node_round_trips_every_field(store: Store):
    node = _node(
        state_since=datetime(2025, 3, 1, 14, 0, tzinfo=CEST),
        cordoned=True,
        draining=True,
        last_heartbeat_at=T0 + timedelta(seconds=2),
        heartbeat_seq=41,
    )
    await store.upsert_node(node)

    got = await store.get_node("gpu-01")

    assert got == node
    # Given in +02:00, returned as the same instant in UTC.
    assert got.state_since.tzinfo is not None
    assert got.state_since.utcoffset() == timedelta(0)
    assert got.state_since == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


async def test_an_unknown_node_is_none(store: Store):
    assert await store.get_node("nope") is None


async def test_re_registering_a_node_replaces_its_facts_but_keeps_cordon_and_drain(store: Store):
    await store.upsert_node(_node(draining=True))
    assert await store.set_node_cordoned("gpu-01", True) is True

    await store.upsert_node(
        _node(version="0.2.0", gpus=[], state="registering", cordoned=False, draining=False)
    )

    got = await store.get_node("gpu-01")
    assert (got.version, got.gpus, got.state) == ("0.2.0", [], "registering")
    assert got.cordoned is True
    assert got.draining is True


async def test_nodes_are_listed_by_node_id(store: Store):
    ids = ["b", "a_1", "Z", "a-2", "a", "10", "9"]
    for node_id in ids:
        await store.upsert_node(_node(node_id))

    listed = [n.node_id for n in await store.list_nodes()]

    # Byte order on both backends, whatever the PostgreSQL database's locale.
    assert listed == sorted(ids)


async def test_setting_a_node_state_records_state_reason_and_since(store: Store):
    await store.upsert_node(_node())
    since = T0 + timedelta(seconds=30)

    await store.set_node_state("gpu-01", "not_ready", "no heartbeat for 15 s", since)

    got = await store.get_node("gpu-01")
    assert (got.state, got.reason, got.state_since) == ("not_ready", "no heartbeat for 15 s", since)


async def test_setting_the_state_of_an_unknown_node_changes_nothing(store: Store):
    await store.set_node_state("ghost", "gone", "", T0)
    assert await store.list_nodes() == []


async def test_cordoning_an_unknown_node_returns_false(store: Store):
    assert await store.set_node_cordoned("ghost", True) is False


async def test_cordoning_and_uncordoning_a_node_is_kept(store: Store):
    await store.upsert_node(_node())
    assert await store.set_node_cordoned("gpu-01", True) is True
    assert (await store.get_node("gpu-01")).cordoned is True
    assert await store.set_node_cordoned("gpu-01", False) is True
    assert (await store.get_node("gpu-01")).cordoned is False


async def test_naive_datetimes_are_refused_rather_than_guessed(store: Store):
    # Guards against a local time being stored as UTC, shifting every timestamp.
    with pytest.raises(ValueError, match="no timezone"):
        await store.upsert_node(_node(state_since=datetime(2025, 3, 1, 12, 0)))


# Heartbeats


async def test_a_heartbeat_batch_updates_every_node_it_names(store: Store):
    for node_id in ("gpu-01", "gpu-02", "gpu-03"):
        await store.upsert_node(_node(node_id))
    sample = {"gpus": [{"index": 0, "util_pct": 87.5}], "memory_used_bytes": 123}

    await store.record_heartbeats(
        [
            HeartbeatRow(node_id="gpu-01", at=T0 + timedelta(seconds=1), seq=7, sample=sample),
            HeartbeatRow(node_id="gpu-02", at=T0 + timedelta(seconds=1), seq=3),
            # A node removed since its heartbeat was buffered: dropped, not an error.
            HeartbeatRow(node_id="ghost", at=T0, seq=1),
            # A later heartbeat of the same node in the same batch wins.
            HeartbeatRow(node_id="gpu-02", at=T0 + timedelta(seconds=3), seq=4),
        ]
    )

    one, two, three = await store.list_nodes()
    assert (one.last_heartbeat_at, one.heartbeat_seq) == (T0 + timedelta(seconds=1), 7)
    assert (two.last_heartbeat_at, two.heartbeat_seq) == (T0 + timedelta(seconds=3), 4)
    assert (three.last_heartbeat_at, three.heartbeat_seq) == (None, 0)
    assert await _stored_sample(store, "gpu-01") == sample
    assert await _stored_sample(store, "gpu-03") is None
    assert await store.get_node("ghost") is None


async def test_an_empty_heartbeat_batch_is_fine(store: Store):
    await store.record_heartbeats([])


async def test_a_heartbeat_sample_survives_re_registration(store: Store):
    await store.upsert_node(_node())
    await store.record_heartbeats([HeartbeatRow(node_id="gpu-01", at=T0, seq=1, sample={"a": 1})])
    await store.upsert_node(_node())
    assert await _stored_sample(store, "gpu-01") == {"a": 1}


# Durability


async def test_data_survives_closing_and_reopening_the_store(
    store: Store, store_config: StoreConfig, store_paths: Paths
):
    await store.upsert_node(_node("gpu-01", cordoned=True))
    await store.upsert_node(_node("gpu-02"))
    await store.record_heartbeats([HeartbeatRow(node_id="gpu-02", at=T0, seq=9)])
    before = await store.list_nodes()
    await store.close()

    reopened = await connect_store(store_config, store_paths)
    try:
        assert await reopened.list_nodes() == before
    finally:
        await reopened.close()


# Opening from the configuration


async def test_an_empty_dsn_opens_sqlite_under_the_data_dir_in_a_private_folder(tmp_path: Path):
    paths = Paths.under(tmp_path / "home")
    store = await connect_store(StoreConfig(), paths)
    try:
        assert store.backend == "sqlite"
        assert paths.sqlite_file.exists()
        assert stat.S_IMODE(paths.sqlite_file.parent.stat().st_mode) == 0o700
    finally:
        await store.close()


async def test_a_sqlite_dsn_file_is_read_and_its_whitespace_stripped(tmp_path: Path):
    paths = Paths.under(tmp_path / "home")
    db = tmp_path / "elsewhere" / "state.db"
    dsn_file = tmp_path / "store-dsn"
    dsn_file.write_text(f"  sqlite://{db}\n\n")

    store = await connect_store(StoreConfig(dsn_file=str(dsn_file)), paths)
    try:
        await store.upsert_node(_node())
    finally:
        await store.close()

    assert isinstance(store, SqliteStore) and store.path == db
    assert db.exists()


def test_a_missing_dsn_file_is_a_config_error_saying_what_to_do(tmp_path: Path):
    cfg = StoreConfig(dsn_file=str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match="does not exist") as info:
        open_store_from_config(cfg, Paths.under(tmp_path))
    assert "write the DSN" in info.value.hint


def test_a_dsn_file_with_garbage_is_refused_without_echoing_it(tmp_path: Path):
    dsn_file = tmp_path / "store-dsn"
    dsn_file.write_text("mysql://root:hunter2@db/x")
    with pytest.raises(ConfigError) as info:
        open_store_from_config(StoreConfig(dsn_file=str(dsn_file)), Paths.under(tmp_path))
    assert "hunter2" not in str(info.value)


def test_a_postgres_dsn_opens_postgres_and_never_shows_its_password():
    store = open_store_from_config(
        StoreConfig(dsn="postgres://gw:hunter2@db.lab:5432/llmgw"), Paths.under(Path("/nowhere"))
    )
    assert isinstance(store, PostgresStore)
    assert "hunter2" not in repr(store)


def test_masking_a_dsn_hides_passwords_in_userinfo_and_query():
    assert mask_dsn("postgresql://gw:p%40ss@db:5432/x?password=two&sslmode=require") == (
        "postgresql://gw:***@db:5432/x?password=***&sslmode=require"
    )
    assert mask_dsn("postgresql://gw@db/x") == "postgresql://gw@db/x"


async def test_an_unreachable_postgres_is_a_store_error_without_the_password(tmp_path: Path):
    # Port 1: nothing listens there, so the connection is refused at once.
    cfg = StoreConfig(dsn="postgresql://postgres:s3cret-pw@127.0.0.1:1/x?password=s3cret-q")
    with pytest.raises(StoreError, match="cannot reach PostgreSQL") as info:
        await connect_store(cfg, Paths.under(tmp_path))
    text = f"{info.value} {info.value.hint}"
    assert "s3cret" not in text
    assert "127.0.0.1:1" in text
    assert isinstance(info.value.__cause__, OSError)


@pytest.mark.postgres
async def test_a_missing_postgres_database_is_a_store_error_saying_to_create_it(
    postgres_dsn: str, tmp_path: Path
):
    # Trust auth ignores the password, so the server answers "no such database".
    dsn = postgres_dsn.replace("postgres@", "postgres:s3cret-pw@").rsplit("/", 1)[0] + "/absent"
    with pytest.raises(StoreError, match="absent") as info:
        await connect_store(StoreConfig(dsn=dsn), Paths.under(tmp_path))
    assert "create the database" in info.value.hint
    assert "s3cret" not in f"{info.value} {info.value.hint}"
    assert isinstance(info.value.__cause__, asyncpg.InvalidCatalogNameError)
