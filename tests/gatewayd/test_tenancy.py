"""Organizations, teams and projects: in the store (both backends) and the rules of the tree."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gatewayd.gateway.policy.keys import KeyCache, KeyRefused
from gatewayd.gateway.policy.limits import Limits
from gatewayd.gateway.policy.tenancy import Tenancy, TenancyRefused, ancestors, check_path
from gatewayd.store import Store, TenantRecord

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


async def test_tenants_round_trip_and_a_second_create_is_refused(store: Store):
    assert await store.create_tenant(TenantRecord(kind="org", path="Acme", created_at=T0))
    assert not await store.create_tenant(TenantRecord(kind="org", path="Acme", created_at=T0))
    await store.create_tenant(TenantRecord(kind="team", path="Acme/ml", created_at=T0))
    await store.put_tenant(
        TenantRecord(kind="org", path="Acme", limits={"rpm": 60}, created_at=T0 + timedelta(1))
    )
    got = {t.path: t for t in await store.list_tenants()}
    assert list(got) == ["Acme", "Acme/ml"]
    assert got["Acme"].limits == {"rpm": 60} and got["Acme"].created_at == T0
    assert got["Acme"].id.startswith("ten_") and got["Acme"].id != got["Acme/ml"].id
    assert (await store.remove_tenant("Acme/ml", force=False, now=T0)).removed
    assert await store.remove_tenant("Acme/ml", force=False, now=T0) is None


async def test_a_rename_moves_the_levels_beneath_and_their_keys_in_one_go(store: Store):
    tenancy = Tenancy(store)
    keys = KeyCache(store, tenancy)
    await tenancy.create("project", "Acme/ml/search", parents=True)
    await tenancy.create("project", "Acme/ml_x/other", parents=True)  # '_' is not a wildcard
    rec, _ = await keys.create("Acme/ml/search", "svc", [], 0)
    renamed = await tenancy.rename("team", "Acme/ml", "research")
    assert renamed.path == "Acme/research"
    assert [t.path for t in await store.list_tenants()] == [
        "Acme",
        "Acme/ml_x",
        "Acme/ml_x/other",
        "Acme/research",
        "Acme/research/search",
    ]
    assert [(k.key_id, k.project) for k in await store.list_keys()] == [
        (rec.key_id, "Acme/research/search")
    ]


async def test_the_tree_refuses_what_it_cannot_hold(store: Store):
    tenancy = Tenancy(store)
    with pytest.raises(TenancyRefused, match="no organization 'Acme'.*--parents"):
        await tenancy.create("team", "Acme/ml")
    with pytest.raises(TenancyRefused, match="a team is named ORG/TEAM"):
        await tenancy.create("team", "Acme")
    with pytest.raises(TenancyRefused, match="not a valid name"):
        await tenancy.create("org", ".hidden")
    await tenancy.create("team", "Acme/ml", parents=True)
    with pytest.raises(TenancyRefused, match="already exists") as e:
        await tenancy.create("org", "Acme")
    assert e.value.kind == "conflict"
    with pytest.raises(TenancyRefused, match="still holds 1 level .*remove it first"):
        await tenancy.remove("org", "Acme")
    keys = KeyCache(store, tenancy)
    await tenancy.create("project", "Acme/ml/p")
    await keys.create("Acme/ml/p", "a", [], 0)
    await keys.create("Acme/ml/p", "b", [], 0)
    with pytest.raises(TenancyRefused, match="still holds 2 API keys that work .*revoke them"):
        await tenancy.remove("project", "Acme/ml/p")
    await tenancy.remove("project", "Acme/ml/p", force=True)
    await tenancy.create("team", "Acme/ai")
    with pytest.raises(TenancyRefused, match="'Acme/ai' already exists"):
        await tenancy.rename("team", "Acme/ml", "ai")
    assert (await tenancy.rename("team", "Acme/ml", "ml")).path == "Acme/ml"


async def test_keys_need_their_project_and_carry_the_chain_of_limits(store: Store):
    tenancy = Tenancy(store)
    keys = KeyCache(store, tenancy)
    with pytest.raises(KeyRefused, match="no project 'Acme/ml/search'; create it first"):
        await keys.create("Acme/ml/search", "", [], 0)
    await tenancy.create("project", "Acme/ml/search", parents=True)
    await tenancy.set_limits("Acme/ml", Limits(rpm=10))
    await tenancy.set_limits("Acme", Limits(budget_month_micros=5_000_000))
    rec, secret = await keys.create("Acme/ml/search", "", [], 0, rpm=100)
    info = keys.lookup(secret)
    assert info.scopes == (
        (f"key:{rec.key_id}", Limits(rpm=100)),
        ("project:Acme/ml/search", Limits()),
        ("team:Acme/ml", Limits(rpm=10)),
        ("org:Acme", Limits(budget_month_micros=5_000_000)),
    )
    # A fresh cache (another control plane) sees the same.
    other = KeyCache(store)
    await other.refresh()
    assert other.lookup(secret).scopes == info.scopes


async def test_a_rotated_key_works_beside_the_new_one_until_the_overlap_ends(store: Store):
    tenancy = Tenancy(store)
    keys = KeyCache(store, tenancy)
    await tenancy.create("project", "Acme/ml/search", parents=True)
    old, old_secret = await keys.create("Acme/ml/search", "svc", ["chat"], 0, rpm=7)
    new, new_secret = await keys.rotate(old.key_id, 3600)
    assert new.rotated_from == old.key_id and new.limits == old.limits and new.models == ["chat"]
    now = datetime.now(UTC)
    assert keys.lookup(new_secret).refusal(now) == ""
    assert keys.lookup(old_secret).refusal(now) == ""
    assert keys.lookup(old_secret).refusal(now + timedelta(hours=2)) == "this API key has expired"
    stored = {k.key_id: k for k in await store.list_keys()}
    assert stored[old.key_id].kind == "rotated" and stored[old.key_id].rotated_to == new.key_id
    with pytest.raises(KeyRefused, match="already rotated"):
        await keys.rotate(old.key_id, 0)
    _, _ = await keys.rotate(new.key_id, 0)
    assert keys.lookup(new_secret).refusal(datetime.now(UTC) + timedelta(seconds=1))


def test_paths_and_their_ancestors():
    assert ancestors("Acme/ml/search") == ["Acme/ml/search", "Acme/ml", "Acme"]
    assert check_path("project", "a/b/c") == "a/b/c"
    with pytest.raises(TenancyRefused):
        check_path("project", "a/b")
