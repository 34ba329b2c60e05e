"""The MCP gateway's state in the store, on SQLite and on a real PostgreSQL alike."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gatewayd.store import McpCallRow, McpServerRecord, Store, TenantRecord, connect_store
from llmgw.config import StoreConfig
from llmgw.paths import Paths

T0 = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)


def _server(name: str = "hr", **changes) -> McpServerRecord:
    fields = {
        "name": name,
        "url": f"http://127.0.0.1:9000/{name}/mcp",
        "transport": "streamable_http",
        "description": "people lookup",
        "headers": {"X-Team": "people"},
        "secret_refs": {"Authorization": f"mcp/{name}/00000000000000a1"},
        "timeout_s": 5.0,
        "rate_per_minute": 60,
        "created_at": T0,
        "updated_at": T0,
    }
    return McpServerRecord(**(fields | changes))


async def _tree(store: Store) -> None:
    """The levels the grants name: a grant is kept by its level's id, so the level must exist."""
    for kind, path in (("org", "Acme"), ("team", "Acme/ml"), ("project", "Acme/ml/search")):
        await store.create_tenant(TenantRecord(kind=kind, path=path, created_at=T0))


def _call(minute: int, **changes) -> McpCallRow:
    fields = {
        "at": T0 + timedelta(minutes=minute),
        "key_id": "key_aa",
        "project": "Acme/ml/search",
        "server": "hr",
        "tool": "lookup",
        "status": "ok",
        "latency_ms": 1.25,
        "bytes_in": 120,
        "bytes_out": 340,
    }
    return McpCallRow(**(fields | changes))


async def test_a_server_comes_back_whole_and_a_replacement_keeps_its_created_at(store: Store):
    rec = _server()
    await store.put_mcp_server(rec, {"mcp/hr/00000000000000a1": b"sealed-1"})

    assert await store.get_mcp_server("hr") == rec
    changed = _server(
        enabled=False, created_at=T0 + timedelta(hours=1), updated_at=T0 + timedelta(hours=1)
    )
    await store.put_mcp_server(changed, {})

    got = await store.get_mcp_server("hr")
    assert got == dataclasses.replace(changed, created_at=T0)
    assert await store.get_mcp_server("wiki") is None


async def test_servers_are_listed_by_name(store: Store):
    for name in ("wiki", "hr", "jira-cloud", "hr_2"):
        await store.put_mcp_server(_server(name, secret_refs={}), {})

    assert [s.name for s in await store.list_mcp_servers()] == ["hr", "hr_2", "jira-cloud", "wiki"]


async def test_a_sealed_secret_no_server_refers_to_any_more_is_removed_on_change(store: Store):
    # Guards against old credentials piling up in the store after every `mcp change`.
    old, new = "mcp/hr/00000000000000a1", "mcp/hr/00000000000000b2"
    await store.put_mcp_server(_server(secret_refs={"Authorization": old}), {old: b"one"})
    await store.put_mcp_server(
        _server("wiki", secret_refs={"X-Key": "mcp/wiki/1"}), {"mcp/wiki/1": b"w"}
    )

    await store.put_mcp_server(_server(secret_refs={"Authorization": new}), {new: b"two"})

    assert await store.list_sealed_secret_refs() == [new, "mcp/wiki/1"]
    assert await store.get_sealed_secrets([old, new]) == {new: b"two"}


async def test_removing_a_server_removes_its_grants_and_its_sealed_secrets(store: Store):
    await _tree(store)
    await store.put_mcp_server(_server(), {"mcp/hr/00000000000000a1": b"sealed"})
    await store.put_mcp_server(_server("hr_2", secret_refs={}), {})
    await store.add_mcp_grant("project:Acme/ml/search", "hr", T0)
    await store.add_mcp_grant("key:key_aa", "hr.lookup", T0)
    # hr_2 and hrx share the prefix "hr" but are other servers: '_' is no wildcard here.
    await store.add_mcp_grant("org:Acme", "hr_2", T0)
    await store.add_mcp_grant("org:Acme", "hrx.lookup", T0)

    assert await store.delete_mcp_server("hr") == 2

    assert await store.get_mcp_server("hr") is None
    assert await store.list_sealed_secret_refs() == []
    assert [(g.scope, g.target) for g in await store.list_mcp_grants()] == [
        ("org:Acme", "hr_2"),
        ("org:Acme", "hrx.lookup"),
    ]
    assert await store.delete_mcp_server("hr") is None


async def test_sealed_secrets_are_read_by_ref_and_unknown_refs_are_left_out(store: Store):
    refs = {"Authorization": "mcp/hr/1", "X-Api-Key": "mcp/hr/2"}
    await store.put_mcp_server(
        _server(secret_refs=refs), {"mcp/hr/1": b"\x00\xffa", "mcp/hr/2": b"b"}
    )

    got = await store.get_sealed_secrets(["mcp/hr/1", "mcp/hr/2", "mcp/hr/9", "mcp/hr/1"])

    assert got == {"mcp/hr/1": b"\x00\xffa", "mcp/hr/2": b"b"}
    assert await store.get_sealed_secrets([]) == {}


async def test_a_grant_given_twice_is_kept_once(store: Store):
    await _tree(store)
    assert await store.add_mcp_grant("team:Acme/nope", "hr", T0) is False  # no such team
    assert await store.add_mcp_grant("team:Acme/ml", "hr", T0) is True
    assert await store.add_mcp_grant("team:Acme/ml", "hr", T0 + timedelta(hours=1)) is False

    grants = await store.list_mcp_grants()
    assert [(g.scope, g.target, g.created_at) for g in grants] == [("team:Acme/ml", "hr", T0)]


async def test_grants_are_listed_by_scope_then_target_and_revoked_one_at_a_time(store: Store):
    await _tree(store)
    for scope, target in [
        ("project:Acme/ml/search", "wiki"),
        ("key:key_aa", "hr.lookup"),
        ("project:Acme/ml/search", "hr"),
        ("org:Acme", "llmgw:admin"),
    ]:
        await store.add_mcp_grant(scope, target, T0)

    assert await store.remove_mcp_grant("project:Acme/ml/search", "hr") is True
    assert await store.remove_mcp_grant("project:Acme/ml/search", "hr") is False

    assert [(g.scope, g.target) for g in await store.list_mcp_grants()] == [
        ("key:key_aa", "hr.lookup"),
        ("org:Acme", "llmgw:admin"),
        ("project:Acme/ml/search", "wiki"),
    ]


async def test_call_rows_come_back_whole_oldest_first(store: Store):
    rows = [_call(2), _call(0, status="tool_error", latency_ms=0.5), _call(1, status="timeout")]
    await store.record_mcp_calls(rows)
    await store.record_mcp_calls([])

    assert await store.list_mcp_calls() == [rows[1], rows[2], rows[0]]


async def test_call_rows_filter_by_time_server_key_and_project(store: Store):
    await store.record_mcp_calls(
        [
            _call(0),
            _call(1, server="wiki", tool="search"),
            _call(2, key_id="key_bb"),
            _call(3, project="Acme/ops/infra"),
            _call(4),
        ]
    )

    def minutes(rows: list[McpCallRow]) -> list[int]:
        return [int((r.at - T0).total_seconds() // 60) for r in rows]

    assert minutes(await store.list_mcp_calls(since=T0 + timedelta(minutes=1))) == [1, 2, 3, 4]
    # until is exclusive: a row at exactly `until` belongs to the next window.
    assert minutes(await store.list_mcp_calls(until=T0 + timedelta(minutes=2))) == [0, 1]
    assert minutes(await store.list_mcp_calls(server="wiki")) == [1]
    assert minutes(await store.list_mcp_calls(key_id="key_bb")) == [2]
    assert minutes(await store.list_mcp_calls(project="Acme/ops/infra")) == [3]
    # A level takes what is beneath it; Acme/o is no level above Acme/ops.
    assert minutes(await store.list_mcp_calls(project="Acme/ops")) == [3]
    assert minutes(await store.list_mcp_calls(project="Acme")) == [0, 1, 2, 3, 4]
    assert minutes(await store.list_mcp_calls(project="Acme/o")) == []
    assert minutes(
        await store.list_mcp_calls(
            since=T0,
            until=T0 + timedelta(minutes=5),
            server="hr",
            key_id="key_aa",
            project="Acme/ml/search",
        )
    ) == [0, 4]
    assert minutes(await store.list_mcp_calls(limit=2)) == [0, 1]


async def _same_story(store: Store) -> tuple:
    """One sequence of changes; what the store answers after it."""
    await _tree(store)
    await store.put_mcp_server(_server(), {"mcp/hr/00000000000000a1": b"one"})
    await store.put_mcp_server(_server("wiki", transport="sse", secret_refs={}), {})
    await store.put_mcp_server(
        _server(secret_refs={"Authorization": "mcp/hr/2"}), {"mcp/hr/2": b"two"}
    )
    for scope, target in [("org:Acme", "wiki"), ("key:key_aa", "hr.lookup"), ("org:Acme", "wiki")]:
        await store.add_mcp_grant(scope, target, T0)
    await store.record_mcp_calls([_call(1), _call(0, server="wiki", tool="search")])
    removed = await store.delete_mcp_server("wiki")
    return (
        removed,
        await store.list_mcp_servers(),
        await store.list_sealed_secret_refs(),
        await store.get_sealed_secrets(["mcp/hr/2", "mcp/hr/00000000000000a1"]),
        await store.list_mcp_grants(),
        await store.list_mcp_calls(),
    )


@pytest.mark.postgres
async def test_postgresql_and_sqlite_give_the_same_answers(
    tmp_path: Path, store_paths: Paths, fresh_postgres_dsn: str
):
    answers = []
    for cfg in (
        StoreConfig(dsn=f"sqlite://{tmp_path / 'same.db'}"),
        StoreConfig(dsn=fresh_postgres_dsn),
    ):
        store = await connect_store(cfg, store_paths)
        try:
            answers.append(await _same_story(store))
        finally:
            await store.close()

    assert answers[0] == answers[1]
    assert answers[0][0] == 1
