"""The PostgreSQL store's way to its writable member: DSNs listing several, a member that does
not answer, one that takes no writes, connections that die under it.

On a real PostgreSQL (tests/pg_fixture.py); a change of primary under Patroni
is tests/faults/test_store_failover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from gatewayd.gateway.metering.usage import UsageRow
from gatewayd.store.postgres.connect import (
    DEAD_PEER_S,
    KEEPALIVE_IDLE_S,
    Member,
    MemberDialer,
    NoWritableMember,
    members_of,
)
from gatewayd.store.postgres.store import PostgresStore
from llmgw.errors import StoreError
from tests.pg_fixture import PostgresCluster, _start_cluster

PROJECT = "Acme/ml/search"


def test_a_dsn_names_its_members_in_order_with_their_ports():
    assert members_of(
        "postgresql://u:p@h1:5433,h2,[::1]:5435/db?target_session_attrs=read-write"
    ) == [
        Member("h1", 5433),
        Member("h2", 5432),
        Member("::1", 5435),
    ]
    # libpq's other spelling: hosts and ports in the query, one port for all or one each.
    assert members_of("postgresql:///db?host=a,b&port=6000") == [
        Member("a", 6000),
        Member("b", 6000),
    ]
    assert members_of("postgresql:///db?host=a,b&port=6000,6001") == [
        Member("a", 6000),
        Member("b", 6001),
    ]
    assert members_of("postgresql:///db?host=/run/postgresql") == [Member("/run/postgresql", 5432)]
    # None named: libpq's defaults (PGHOST, the local socket) are asyncpg's to apply.
    assert members_of("postgresql:///db") == []


def test_a_port_that_is_not_a_number_is_refused_naming_it():
    with pytest.raises(ValueError, match="'x5432' of host 'h1'"):
        members_of("postgresql://h1:x5432/db")


@contextlib.asynccontextmanager
async def _silent_member() -> AsyncIterator[int]:
    """A TCP port that accepts connections and never says a word: a hung machine."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader, writer):
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for w in held:
            w.close()
        server.close()


@pytest.mark.postgres
async def test_a_member_that_does_not_answer_is_given_up_after_the_dial_timeout(
    fresh_postgres_dsn: str,
):
    # Guards a store that hung on the first member of the DSN because one timeout
    # covered them all: a powered-off primary once cost 45 s of hanging requests.
    real = members_of(fresh_postgres_dsn)[0]
    async with _silent_member() as silent:
        dsn = fresh_postgres_dsn.replace(f"{real}", f"127.0.0.1:{silent},{real}")
        dialer = MemberDialer(dsn, dial_timeout_s=0.5)
        began = time.monotonic()
        conn = await dialer()
        took_s = time.monotonic() - began
        await conn.close()
    assert dialer.last_member == real
    assert 0.5 <= took_s < 3.0


@pytest.mark.postgres
async def test_the_stores_connections_notice_a_dead_peer_within_ten_seconds(
    fresh_postgres_dsn: str,
):
    # Guards connections to a vanished machine left to TCP's defaults (minutes).
    conn = await MemberDialer(fresh_postgres_dsn)()
    try:
        sock = conn._transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE_S
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == DEAD_PEER_S * 1000
    finally:
        await conn.close()


def _row(row_id: str) -> UsageRow:
    return UsageRow(key_id="k", project=PROJECT, model="m", row_id=row_id)


@pytest.mark.postgres
async def test_a_statement_whose_connection_died_is_a_store_error_and_the_next_one_works(
    fresh_postgres_dsn: str,
):
    # Guards a raw asyncpg error escaping a store call after the server ended its
    # connection (a primary shutting down ends every one).
    store = PostgresStore(fresh_postgres_dsn)
    await store.open()
    admin = await asyncpg.connect(fresh_postgres_dsn)
    try:
        assert await store.record_usage([_row("a")]) == 1
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'llmgw-gatewayd'"
        )
        # The pool either sees the end first and dials again (the write works), or
        # writes on the dead connection: then a StoreError in words, never asyncpg's own.
        try:
            wrote = await store.record_usage([_row("b")])
        except StoreError as e:
            assert "could not write 1 usage rows in PostgreSQL" in str(e)
        else:
            assert wrote == 1
        assert await store.record_usage([_row("c")]) == 1
    finally:
        await admin.close()
        await store.close()


@pytest.fixture
def own_cluster(postgres_cluster: PostgresCluster):
    """A PostgreSQL of this test's own: it changes server-wide settings."""
    root = Path(tempfile.mkdtemp(prefix="llmgw-pg-ro-", dir="/tmp"))
    root.chmod(0o755)
    cluster = _start_cluster(postgres_cluster.bin_dir, root)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _read_only(dsn: str, on: bool) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        value = "on" if on else "off"
        await conn.execute(f"ALTER SYSTEM SET default_transaction_read_only = {value}")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_connections_to_a_member_that_stopped_taking_writes_are_dropped_not_reused(
    own_cluster: PostgresCluster,
):
    # Guards a pool that kept its connections to a member gone read-only: every write
    # through them would be refused for as long as the pool lived.
    dsn = own_cluster.create_database("ro")
    store = PostgresStore(dsn)
    await store.open()
    try:
        assert await store.record_usage([_row("a")]) == 1
        await _read_only(own_cluster.dsn("postgres"), True)

        async def refused_as_read_only() -> StoreError | None:
            try:
                await store.record_usage([_row("b")])
            except StoreError as e:
                return e
            return None

        # The reload reaches the pooled connection between two statements.
        for _ in range(100):
            if (refused := await refused_as_read_only()) is not None:
                break
            await asyncio.sleep(0.05)
        assert refused is not None and "read-only" in str(refused)
        # The pooled connections were dropped: the next one is dialled, and refused.
        with pytest.raises(StoreError) as again:
            await store.record_usage([_row("c")])
        assert isinstance(again.value.__cause__, NoWritableMember)
        assert "is read-only (default_transaction_read_only)" in str(again.value)
        await _read_only(own_cluster.dsn("postgres"), False)
        assert await store.record_usage([_row("d")]) == 1
    finally:
        await store.close()


@pytest.mark.postgres
async def test_a_store_opened_on_a_dsn_with_no_writable_member_says_why_for_each(
    own_cluster: PostgresCluster,
):
    dsn = own_cluster.create_database("ro_open")
    await _read_only(own_cluster.dsn("postgres"), True)
    member = members_of(dsn)[0]
    # The same server twice, and a port where nothing listens.
    listed = dsn.replace(f"{member}", f"{member},127.0.0.1:1")
    with pytest.raises(StoreError) as info:
        await PostgresStore(listed).open()
    text = str(info.value)
    assert f"{member} is read-only (default_transaction_read_only)" in text
    assert "127.0.0.1:1 refused the connection" in text
