"""Tenants by id: what a level holds refers to its id, on SQLite and PostgreSQL alike.

A rename moves only the level's path; files, batches, stored responses, MCP
grants and usage follow because they name the id. A removal is refused while
the level holds anything, takes it all with force, and leaves its usage under
the last path; a level made again under the old path is a new id that sees
nothing of the old one. A store from before ids migrates with nothing lost.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiosqlite
import asyncpg
import pytest

from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.gateway.policy.tenancy import Tenancy, TenancyRefused
from gatewayd.store import (
    PostgresStore,
    SqliteStore,
    Store,
    UsageRecord,
    connect_store,
    open_store_from_config,
)
from gatewayd.store.batch_records import BatchRecord, FileRecord
from gatewayd.store.migrate import load_migrations, migrations_dir
from gatewayd.store.response_records import StoredResponse
from gatewayd.store.tenant_sql import numbered
from gatewayd.store.usage_query import BUCKET_WIDTHS_S, floor_to
from llmgw.config import StoreConfig
from llmgw.paths import Paths

NOW = datetime.now(UTC).replace(microsecond=0)
DAY = timedelta(days=1)
PROJECT = "acme/ml/search"


async def _a_project_holding_everything(store: Store, path: str = PROJECT):
    """A project with a key, an upload, a batch with its output, a stored response,
    an MCP grant and a request's usage, as the gateway writes them."""
    tenancy = Tenancy(store)
    keys = KeyCache(store, tenancy)
    await tenancy.create("project", path, parents=True)
    project = tenancy.get(path)
    await store.set_retention(project.id, 3600)
    key, _ = await keys.create(path, "svc", [], 0)
    for file_id, purpose in (("file-" + "a" * 24, "batch"), ("file-" + "b" * 24, "batch_output")):
        await store.put_file(
            FileRecord(
                file_id=file_id,
                project_id=project.id,
                key_id=key.key_id,
                filename=f"{purpose}.jsonl",
                purpose=purpose,
                bytes=10,
                created_at=NOW,
                expires_at=NOW + DAY,
            )
        )
    await store.create_batch(
        BatchRecord(
            batch_id="batch_1",
            project_id=project.id,
            key_id=key.key_id,
            endpoint="/v1/chat/completions",
            status="completed",
            input_file_id="file-" + "a" * 24,
            created_at=NOW,
            expires_at=NOW + DAY,
        )
    )
    await store.put_response(
        StoredResponse(
            id="resp_1",
            project_id=project.id,
            key_id=key.key_id,
            created_at=NOW,
            expires_at=NOW + DAY,
            response={"id": "resp_1"},
        )
    )
    assert await store.add_mcp_grant(f"project:{path}", "hr", NOW)
    await store.record_usage(
        [UsageRecord(at=NOW, key_id=key.key_id, project=path, project_id=project.id)]
    )
    return tenancy, keys, project


async def _projects_in_usage(store: Store, under: str = "") -> dict[str, int]:
    groups = await store.usage_groups(["project"], NOW - DAY, NOW + DAY, under)
    return {g.group["project"]: g.requests for g in groups}


async def test_a_rename_moves_files_batches_responses_grants_and_usage_with_the_id(store: Store):
    # Guards: a rename moved only tenants and keys; the key's files, batches, stored
    # responses, MCP grants and usage stayed under acme/ml, out of its project's reach.
    tenancy, _, project = await _a_project_holding_everything(store)

    await tenancy.rename("team", "acme/ml", "ai")

    moved = "acme/ai/search"
    assert tenancy.get(moved).id == project.id
    assert [(k.project_id, k.project) for k in await store.list_keys()] == [(project.id, moved)]
    files = await store.list_files(project.id)
    assert len(files) == 2 and {f.project for f in files} == {moved}
    assert [b.project for b in await store.list_batches(project.id)] == [moved]
    assert (await store.get_response(project.id, "resp_1", NOW)).project == moved
    assert await store.retention_of(project.id) == 3600
    assert [(g.scope, g.target) for g in await store.list_mcp_grants()] == [
        (f"project:{moved}", "hr")
    ]
    assert await _projects_in_usage(store) == {moved: 1}
    assert await _projects_in_usage(store, "acme/ai") == {moved: 1}
    assert await _projects_in_usage(store, "acme/ml") == {}
    # Rows written after the rename, under the new path, make one project with the old.
    await store.record_usage([UsageRecord(at=NOW, project=moved, project_id=project.id)])
    assert await _projects_in_usage(store) == {moved: 2}


async def test_a_removal_is_refused_naming_what_the_project_holds(store: Store):
    # Guards: removing a project deleted only its row, leaving its keys, files, batches
    # and grants behind for whatever came next under that name.
    tenancy, _, _ = await _a_project_holding_everything(store)

    with pytest.raises(TenancyRefused) as refused:
        await tenancy.remove("project", PROJECT)

    said = refused.value.message
    assert "1 API key that work" in said and "svc (key_" in said
    assert "2 files (batch.jsonl (file-" in said and "1 batch (batch_1)" in said
    assert f"1 MCP grant (project:{PROJECT} → hr)" in said
    assert f"llmgw ctl project rm {PROJECT} --force" in said
    assert tenancy.get(PROJECT) is not None


async def test_a_forced_removal_takes_all_but_usage_and_the_name_again_is_a_new_project(
    store: Store,
):
    # Guards: a project made again with a removed one's name read its files, stored
    # responses and inherited its MCP grants.
    tenancy, keys, old = await _a_project_holding_everything(store)

    gone = await tenancy.remove("project", PROJECT, force=True)

    assert (len(gone.live_keys), len(gone.files), gone.batches) == (1, 2, ["batch_1"])
    assert gone.stored_responses == 1 and len(gone.grants) == 1
    assert await store.list_keys() == [] and await store.list_mcp_grants() == []
    assert await store.list_batches() == []
    assert await store.get_response(old.id, "resp_1", NOW) is None
    # The files expire at once: the batch runner's sweep deletes them with their bytes.
    assert {f.file_id for f in await store.expired_files(datetime.now(UTC))} == {
        "file-" + "a" * 24,
        "file-" + "b" * 24,
    }
    # Usage stays, shown under the path the project had last.
    assert await _projects_in_usage(store) == {PROJECT: 1}
    assert await store.tenant_path(old.id) == PROJECT

    await tenancy.create("project", PROJECT)
    new = tenancy.get(PROJECT)
    await store.set_retention(new.id, 3600)
    assert new.id != old.id
    assert await store.list_files(new.id) == [] and await store.list_batches(new.id) == []
    assert await store.get_response(new.id, "resp_1", NOW) is None
    assert await store.list_mcp_grants() == []
    assert keys.records(PROJECT) == []


async def test_a_team_removed_with_force_takes_its_projects_with_it(store: Store):
    tenancy, _, project = await _a_project_holding_everything(store)

    with pytest.raises(TenancyRefused, match="still holds 1 level .*remove it first"):
        await tenancy.remove("team", "acme/ml")
    gone = await tenancy.remove("team", "acme/ml", force=True)

    assert gone.levels == ["acme/ml", PROJECT]
    assert [t.path for t in await store.list_tenants()] == ["acme"]
    assert await store.tenant_path(project.id) == PROJECT


async def test_spent_keys_and_stored_responses_do_not_hold_a_removal_back(store: Store):
    tenancy = Tenancy(store)
    keys = KeyCache(store, tenancy)
    await tenancy.create("project", PROJECT, parents=True)
    key, _ = await keys.create(PROJECT, "old", [], 0)
    await keys.revoke(key.key_id)

    gone = await tenancy.remove("project", PROJECT)

    assert gone.spent_keys == 1 and await store.list_keys() == []


# ---- a store from before ids ------------------------------------------------------


async def _raw(store: Store, statements: list[tuple[str, tuple]]) -> None:
    """Run SQL written with ``?`` on the store's database, as an older llmgw would have."""
    if isinstance(store, SqliteStore):
        async with aiosqlite.connect(store.path) as db:
            for sql, args in statements:
                await db.execute(sql, args)
            await db.commit()
        return
    assert isinstance(store, PostgresStore)
    conn = await asyncpg.connect(store.dsn)
    try:
        for sql, args in statements:
            await conn.execute(numbered(sql), *args)
    finally:
        await conn.close()


async def test_a_store_from_before_ids_migrates_with_nothing_lost(
    store_config: StoreConfig, store_paths: Paths
):
    # Guards: the migration to ids must point every row that named a path at an id;
    # a row left pointing nowhere is a key that stops working or a file that vanishes.
    plain = open_store_from_config(store_config, store_paths)
    before = [m for m in load_migrations(migrations_dir(plain.backend)) if m.name < "0015"]
    old = (
        SqliteStore(plain.path, migrations=before)
        if isinstance(plain, SqliteStore)
        else PostgresStore(plain.dsn, migrations=before)
    )
    await old.open()
    await old.close()
    sqlite = isinstance(plain, SqliteStore)
    at = NOW.isoformat(timespec="microseconds") if sqlite else NOW
    later = (NOW + DAY).isoformat(timespec="microseconds") if sqlite else NOW + DAY
    await _raw(
        plain,
        [
            ("INSERT INTO tenants (path, kind, created_at) VALUES (?, ?, ?)", (p, k, at))
            for p, k in (("acme", "org"), ("acme/ml", "team"), (PROJECT, "project"))
        ]
        + [
            ("UPDATE tenants SET retain_responses_s = 600 WHERE path = ?", (PROJECT,)),
            (
                (
                    "INSERT INTO api_keys (key_id, project, secret_sha256, prefix, created_at)"
                    " VALUES (?, ?, ?, ?, ?)"
                ),
                ("key_live", PROJECT, "h1", "llmgw-abcd", at),
            ),
            # A revoked key of a project removed before ids existed.
            (
                (
                    "INSERT INTO api_keys (key_id, project, secret_sha256, prefix, created_at,"
                    " revoked_at) VALUES (?, ?, ?, ?, ?, ?)"
                ),
                ("key_gone", "acme/old/p", "h2", "llmgw-efgh", at, at),
            ),
            (
                (
                    "INSERT INTO files (file_id, project, key_id, filename, purpose, bytes,"
                    " created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                ("file-" + "c" * 24, PROJECT, "key_live", "in.jsonl", "batch", 5, at, later),
            ),
            (
                (
                    "INSERT INTO batches (batch_id, project, key_id, endpoint, status,"
                    " input_file_id, completion_window, created_at, expires_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    "batch_9",
                    PROJECT,
                    "key_live",
                    "/v1/chat/completions",
                    "completed",
                    "file-" + "c" * 24,
                    "24h",
                    at,
                    later,
                ),
            ),
            (
                (
                    "INSERT INTO responses (id, project, key_id, created_at, expires_at, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)"
                ),
                ("resp_9", PROJECT, "key_live", at, later, '{"response": {"id": "resp_9"}}'),
            ),
            (
                "INSERT INTO mcp_grants (scope, target, created_at) VALUES (?, ?, ?)",
                ("team:acme/ml", "hr", at),
            ),
            (
                "INSERT INTO mcp_grants (scope, target, created_at) VALUES (?, ?, ?)",
                ("key:key_live", "wiki", at),
            ),
            (
                "INSERT INTO mcp_grants (scope, target, created_at) VALUES (?, ?, ?)",
                ("project:acme/old/p", "hr", at),
            ),
        ],
    )
    # Usage as the older store wrote it: rows, and their 5-minute, hourly and daily sums.
    rows = [(PROJECT, 2), ("acme/old/p", 1), ("", 1)]
    statements = [
        (
            "INSERT INTO usage_rows (at, key_id, project, status) VALUES (?, ?, ?, ?)",
            (at, "key_live", path, 200),
        )
        for path, n in rows
        for _ in range(n)
    ]
    for width in BUCKET_WIDTHS_S:
        start = floor_to(NOW, width)
        for path, n in rows:
            statements.append(
                (
                    (
                        "INSERT INTO usage_sums (bucket_s, bucket_start, key_id, project, model,"
                        " served_model, replica, status, requests, errors, prompt_tokens,"
                        " cached_tokens, completion_tokens, cost_micros, latency_ms_sum,"
                        " ttft_ms_sum, ttft_count)"
                        " VALUES (?, ?, ?, ?, '', '', '', 200, ?, 0, 0, 0, 0, 0, 0, 0, 0)"
                    ),
                    (
                        width,
                        start.isoformat(timespec="microseconds") if sqlite else start,
                        "key_live",
                        path,
                        n,
                    ),
                )
            )
    await _raw(plain, statements)

    store = await connect_store(store_config, store_paths)
    try:
        assert "0015_tenant_ids" in await store.applied_migrations()
        tenants = {t.path: t for t in await store.list_tenants()}
        assert list(tenants) == ["acme", "acme/ml", PROJECT]
        project = tenants[PROJECT]
        assert project.id.startswith("ten_") and len({t.id for t in tenants.values()}) == 3
        keys = {k.key_id: k for k in await store.list_keys()}
        assert (keys["key_live"].project_id, keys["key_live"].project) == (project.id, PROJECT)
        # A removed project's key gets an id of its own, not a later project's.
        gone = keys["key_gone"]
        assert gone.project == "acme/old/p" and gone.project_id not in {
            t.id for t in tenants.values()
        }
        assert [f.project for f in await store.list_files(project.id)] == [PROJECT]
        assert [b.batch_id for b in await store.list_batches(project.id)] == ["batch_9"]
        assert (await store.get_response(project.id, "resp_9", NOW)).response == {"id": "resp_9"}
        assert await store.retention_of(project.id) == 600
        assert [(g.scope, g.target) for g in await store.list_mcp_grants()] == [
            ("key:key_live", "wiki"),
            ("team:acme/ml", "hr"),
        ]
        # The grant of the removed project is kept (under its own id), but reaches nobody.
        await store.create_tenant(project.model_copy(update={"id": "ten_x", "path": "acme/old/p"}))
        assert ("project:acme/old/p", "hr") not in [
            (g.scope, g.target) for g in await store.list_mcp_grants()
        ]

        # Renamed after the migration, the old usage moves with the id.
        await store.rename_tenant("acme/ml", "acme/ai")
        usage = await _projects_in_usage(store)
        assert usage == {"acme/ai/search": 2, "acme/old/p": 1, "": 1}
    finally:
        await store.close()
