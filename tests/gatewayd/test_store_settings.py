"""The versions of the cluster's kept settings, on SQLite and on a real PostgreSQL alike."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from gatewayd.store import Store, connect_store
from gatewayd.store.settings_records import SettingsConflict
from llmgw.config import StoreConfig
from llmgw.paths import Paths

T0 = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)
DOC = {"router": {"admission": {"bands": [{"name": "default", "max_queue": 1000}]}}}


async def test_a_store_without_settings_has_no_version_at_all(store: Store):
    assert await store.latest_settings_version() == 0
    assert await store.get_settings() is None
    assert await store.get_settings(1) is None
    assert await store.list_settings_versions() == []


async def test_each_version_keeps_its_document_who_when_why_and_what_it_was_made_from(
    store: Store,
):
    first = await store.put_settings(
        DOC, parent_version=0, author="server.yaml", comment="from server.yaml", at=T0
    )
    changed = {"router": {"admission": {"bands": [{"name": "default", "max_queue": 5}]}}}
    second = await store.put_settings(
        changed, parent_version=1, author="alice", comment="smaller queue", at=T0 + timedelta(1)
    )

    assert (first.version, second.version) == (1, 2)
    assert await store.latest_settings_version() == 2
    newest = await store.get_settings()
    assert newest == second
    assert newest.document == changed and newest.author == "alice"
    assert newest.comment == "smaller queue" and newest.parent_version == 1
    assert newest.at == T0 + timedelta(1)
    old = await store.get_settings(1)
    assert old.document == DOC and old.author == "server.yaml" and old.at == T0
    assert [v.version for v in await store.list_settings_versions()] == [2, 1]
    assert [v.version for v in await store.list_settings_versions(limit=1)] == [2]


async def test_a_version_made_from_a_replaced_one_is_refused_naming_the_newest(store: Store):
    # Regression guarded: two operators editing at once, the second silently
    # undoing the first's change.
    await store.put_settings(DOC, parent_version=0, author="a", comment="", at=T0)
    await store.put_settings(DOC, parent_version=1, author="bob", comment="", at=T0)

    with pytest.raises(SettingsConflict) as refused:
        await store.put_settings(DOC, parent_version=1, author="carol", comment="", at=T0)

    assert refused.value.latest.version == 2
    assert "version 2 was written by bob" in refused.value.message
    assert "version 2" in refused.value.hint
    assert await store.latest_settings_version() == 2


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_two_control_planes_writing_from_one_parent_at_once_keep_exactly_one(
    backend, tmp_path, request
):
    # Two connections to one store, as two control planes have: both try to
    # write version 2 from version 1 in the same instant; one wins, the other
    # is told which version to rebase on, and nothing is lost or doubled.
    paths = Paths.under(tmp_path / "home")
    if backend == "sqlite":
        cfg = StoreConfig(dsn=f"sqlite:///{tmp_path / 'shared.db'}")
    else:
        cfg = StoreConfig(dsn=request.getfixturevalue("fresh_postgres_dsn"))
    a = await connect_store(cfg, paths)
    b = await connect_store(cfg, paths)
    try:
        await a.put_settings(DOC, parent_version=0, author="seed", comment="", at=T0)
        results = await asyncio.gather(
            a.put_settings({"x": "a"}, parent_version=1, author="a", comment="", at=T0),
            b.put_settings({"x": "b"}, parent_version=1, author="b", comment="", at=T0),
            return_exceptions=True,
        )
        kept = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, SettingsConflict)]
        assert len(kept) == 1 and len(refused) == 1
        assert refused[0].latest.version == 2
        assert (await a.get_settings(2)).document == kept[0].document
        assert await b.latest_settings_version() == 2
    finally:
        await a.close()
        await b.close()
