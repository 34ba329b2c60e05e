"""McpRegistry: servers, grants and credentials read from a real store; the grant rule."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio

from gatewayd.gateway.policy.keys import KeyInfo
from gatewayd.mcp.registry import McpRegistry
from gatewayd.mcp.seal import Sealer, SealError
from gatewayd.store import McpServerRecord, SqliteStore, TenantRecord
from llmgw.errors import NotFoundError, StoreError
from llmgw.mcp.config import McpConfig

T0 = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
PROJECT = "Acme/ml/search"
ORIGIN = "http://127.0.0.1:9"  # of every _server()'s address


def _key(key_id: str = "key_aa", project: str = PROJECT) -> KeyInfo:
    return KeyInfo(key_id, project, frozenset(), None, False)


def _server(name: str = "hr", **changes) -> McpServerRecord:
    fields = {"name": name, "url": f"http://127.0.0.1:9/{name}/mcp", "transport": "streamable_http"}
    return McpServerRecord(**(fields | changes))


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "llmgw.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def sealer(tmp_path: Path) -> Sealer:
    return Sealer(tmp_path / "secrets" / "mcp-seal.key")


@pytest.fixture
def registry(store: SqliteStore, sealer: Sealer) -> McpRegistry:
    return McpRegistry(store, sealer, McpConfig(refresh_interval_s=0.05))


async def _level(store: SqliteStore, scope: str) -> None:
    """The level a grant names (a grant is kept by the level's id, so it must exist)."""
    kind, _, path = scope.partition(":")
    if kind != "key":
        await store.create_tenant(TenantRecord(kind=kind, path=path, created_at=T0))


async def _grant(store: SqliteStore, registry: McpRegistry, *grants: tuple[str, str]) -> None:
    for scope, target in grants:
        await _level(store, scope)
        await store.add_mcp_grant(scope, target, T0)
    await registry.refresh()


async def _with_servers(store: SqliteStore, *names: str) -> None:
    for name in names:
        await store.put_mcp_server(_server(name), {})


async def test_a_key_may_call_nothing_until_something_is_granted(store, registry):
    await _with_servers(store, "hr")
    await registry.refresh()

    assert registry.allowed(_key(), "hr", "lookup") is False
    assert registry.granted_servers(_key()) == []


async def test_a_team_grant_reaches_a_key_of_one_of_its_projects(store, registry):
    await _with_servers(store, "hr")
    await _grant(store, registry, ("team:Acme/ml", "hr"))

    assert registry.allowed(_key(), "hr", "lookup") is True
    assert registry.allowed(_key("key_bb", "Acme/ml/ranking"), "hr", "lookup") is True
    assert registry.allowed(_key("key_cc", "Acme/ops/infra"), "hr", "lookup") is False


async def test_org_and_project_grants_reach_the_keys_beneath_them(store, registry):
    await _with_servers(store, "hr", "wiki")
    await _grant(store, registry, ("org:Acme", "wiki"), (f"project:{PROJECT}", "hr"))

    assert registry.granted_servers(_key()) == ["hr", "wiki"]
    assert registry.granted_servers(_key("key_bb", "Acme/ops/infra")) == ["wiki"]


async def test_a_key_grant_reaches_only_that_key(store, registry):
    await _with_servers(store, "hr")
    await _grant(store, registry, ("key:key_aa", "hr"))

    assert registry.allowed(_key("key_aa"), "hr", "lookup") is True
    assert registry.allowed(_key("key_bb"), "hr", "lookup") is False


async def test_a_grant_to_another_org_does_not_leak(store, registry):
    # Guards against matching scopes by prefix: Acme2 is not beneath Acme, nor
    # Acme/mlx beneath Acme/ml.
    await _with_servers(store, "hr", "wiki")
    await _grant(
        store,
        registry,
        ("org:Globex", "hr"),
        ("org:Acme2", "hr"),
        ("team:Acme/mlx", "wiki"),
        ("project:Acme/ml/search2", "wiki"),
    )

    assert registry.granted_servers(_key()) == []
    assert registry.allowed(_key(), "hr", "lookup") is False
    assert registry.allowed(_key("key_g", "Globex/a/b"), "hr", "lookup") is True


async def test_a_server_grant_covers_every_tool_of_it(store, registry):
    await _with_servers(store, "hr")
    await _grant(store, registry, ("team:Acme/ml", "hr"))

    for tool in ("lookup", "slow", "anything.dotted"):
        assert registry.allowed(_key(), "hr", tool) is True


async def test_a_server_tool_grant_covers_only_that_tool(store, registry):
    await _with_servers(store, "hr", "hr_2")
    await _grant(store, registry, ("key:key_aa", "hr.lookup"))

    assert registry.allowed(_key(), "hr", "lookup") is True
    assert registry.allowed(_key(), "hr", "slow") is False
    assert registry.allowed(_key(), "hr_2", "lookup") is False
    assert registry.granted_servers(_key()) == ["hr"]


async def test_grants_at_several_levels_add_up(store, registry):
    await _with_servers(store, "hr")
    await _grant(store, registry, ("key:key_aa", "hr.lookup"), ("org:Acme", "hr.slow"))

    assert registry.allowed(_key(), "hr", "lookup") is True
    assert registry.allowed(_key(), "hr", "slow") is True
    assert registry.allowed(_key(), "hr", "other") is False


async def test_revoking_a_grant_hides_the_tool_again_after_a_refresh(store, registry):
    await _with_servers(store, "hr")
    await _grant(store, registry, ("team:Acme/ml", "hr"))
    assert registry.allowed(_key(), "hr", "lookup") is True

    assert await store.remove_mcp_grant("team:Acme/ml", "hr") is True
    await registry.refresh()

    assert registry.allowed(_key(), "hr", "lookup") is False
    assert registry.granted_servers(_key()) == []


async def test_a_disabled_server_allows_nothing_though_granted(store, registry):
    await store.put_mcp_server(_server("hr", enabled=False), {})
    await _grant(store, registry, ("team:Acme/ml", "hr"), ("key:key_aa", "hr.lookup"))

    assert registry.allowed(_key(), "hr", "lookup") is False
    assert registry.granted_servers(_key()) == []
    assert [s.name for s in registry.servers()] == ["hr"]

    await store.put_mcp_server(_server("hr", enabled=True), {})
    await registry.refresh()
    assert registry.allowed(_key(), "hr", "lookup") is True


async def test_a_grant_naming_an_unknown_server_allows_nothing(store, registry):
    await _grant(store, registry, ("team:Acme/ml", "gone"))

    assert registry.allowed(_key(), "gone", "lookup") is False
    assert registry.granted_servers(_key()) == []
    assert [g.target for g in registry.grants()] == ["gone"]


async def test_llmgw_admin_is_granted_like_a_server_and_listed_first(store, registry):
    await _with_servers(store, "hr")
    await _grant(store, registry, ("org:Acme", "llmgw:admin.list_nodes"), ("org:Acme", "hr"))

    assert registry.allowed(_key(), "llmgw:admin", "list_nodes") is True
    assert registry.allowed(_key(), "llmgw:admin", "node_logs") is False
    assert registry.granted_servers(_key()) == ["llmgw:admin", "hr"]


async def test_the_version_moves_and_listeners_hear_only_when_something_changed(store, registry):
    heard: list[int] = []
    registry.on_change(lambda: heard.append(registry.version))

    await registry.refresh()  # an empty store: nothing changed
    assert (registry.version, heard) == (0, [])

    await _with_servers(store, "hr")
    await registry.refresh()
    await registry.refresh()
    assert (registry.version, heard) == (1, [1])

    await _grant(store, registry, ("org:Acme", "hr"))
    assert (registry.version, heard) == (2, [1, 2])


async def test_a_failing_listener_does_not_stop_the_others(store, registry):
    heard: list[str] = []

    def broken() -> None:
        raise RuntimeError("listener bug")

    registry.on_change(broken)
    registry.on_change(lambda: heard.append("second"))
    await _with_servers(store, "hr")

    await registry.refresh()

    assert heard == ["second"]


class _CountingStore:
    """The real store, counting how often sealed secrets are read."""

    def __init__(self, inner: SqliteStore) -> None:
        self._inner = inner
        self.secret_reads = 0

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def get_sealed_secrets(self, refs):
        self.secret_reads += 1
        return await self._inner.get_sealed_secrets(refs)


async def test_headers_are_the_plain_ones_and_the_opened_credentials_read_once(store, sealer):
    counting = _CountingStore(store)
    registry = McpRegistry(counting, sealer, McpConfig())
    ref = sealer.new_ref("hr")
    rec = _server(headers={"X-Team": "people"}, secret_refs={"Authorization": ref})
    await store.put_mcp_server(rec, {ref: sealer.seal("Bearer t0ken", ref, ORIGIN)})
    await registry.refresh()

    first = await registry.headers_for("hr")
    again = await registry.headers_for("hr")

    assert first == again == {"X-Team": "people", "Authorization": "Bearer t0ken"}
    assert counting.secret_reads == 1


async def test_a_replaced_credential_is_sent_after_a_refresh(store, registry, sealer):
    old, new = sealer.new_ref("hr"), sealer.new_ref("hr")
    await store.put_mcp_server(
        _server(secret_refs={"Authorization": old}), {old: sealer.seal("Bearer old", old, ORIGIN)}
    )
    await registry.refresh()
    assert (await registry.headers_for("hr"))["Authorization"] == "Bearer old"

    await store.put_mcp_server(
        _server(secret_refs={"Authorization": new}), {new: sealer.seal("Bearer new", new, ORIGIN)}
    )
    await registry.refresh()

    assert (await registry.headers_for("hr"))["Authorization"] == "Bearer new"


async def test_headers_of_an_unknown_server_or_a_missing_credential_fail_in_words(store, registry):
    with pytest.raises(NotFoundError, match="no MCP server 'hr'"):
        await registry.headers_for("hr")

    await store.put_mcp_server(_server(secret_refs={"Authorization": "mcp/hr/gone"}), {})
    await registry.refresh()
    with pytest.raises(SealError, match="mcp/hr/gone of MCP server hr is not in the store"):
        await registry.headers_for("hr")


async def test_the_timeout_is_the_servers_own_or_the_default(registry):
    assert registry.timeout_s(_server(timeout_s=5.0)) == 5.0
    assert registry.timeout_s(_server()) == McpConfig().default_timeout_s


async def test_tools_seen_of_a_removed_server_are_forgotten(store, registry):
    await _with_servers(store, "hr", "wiki")
    await registry.refresh()
    registry.tools_seen.update({"hr": ["lookup"], "wiki": ["search"], "llmgw:admin": ["x"]})

    await store.delete_mcp_server("wiki")
    await registry.refresh()

    assert registry.tools_seen == {"hr": ["lookup"], "llmgw:admin": ["x"]}


async def test_run_picks_up_a_grant_made_elsewhere(store, registry):
    await _with_servers(store, "hr")
    changed = asyncio.Event()
    registry.on_change(changed.set)
    task = asyncio.create_task(registry.run())
    try:
        await asyncio.wait_for(changed.wait(), 10)  # the first read: the server
        changed.clear()
        # Written straight to the store, as another control plane would.
        await _level(store, "org:Acme")
        await store.add_mcp_grant("org:Acme", "hr", T0)
        await asyncio.wait_for(changed.wait(), 10)
    finally:
        task.cancel()

    assert registry.allowed(_key(), "hr", "lookup") is True


class _FlakyStore(_CountingStore):
    """Fails the first read of servers, as a store that is briefly down would."""

    def __init__(self, inner: SqliteStore) -> None:
        super().__init__(inner)
        self.failed = False

    async def list_mcp_servers(self):
        if not self.failed:
            self.failed = True
            raise StoreError("could not list MCP servers: the database is restarting")
        return await self._inner.list_mcp_servers()


async def test_run_outlives_a_store_outage(store, sealer):
    # Guards against one failed read ending the refresh loop for good.
    flaky = _FlakyStore(store)
    registry = McpRegistry(flaky, sealer, McpConfig(refresh_interval_s=0.01))
    await _with_servers(store, "hr")
    changed = asyncio.Event()
    registry.on_change(changed.set)
    task = asyncio.create_task(registry.run())
    try:
        await asyncio.wait_for(changed.wait(), 10)
    finally:
        task.cancel()

    assert flaky.failed and registry.get("hr") is not None
