"""The catalog, replicas and drain overlay, on both store backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gatewayd.store import Store
from gatewayd.store.records import ModelRecord, NodeRecord, ReplicaRecord

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _model(name: str, **spec) -> ModelRecord:
    return ModelRecord(
        name=name, spec={"name": name, "source": "/m.gguf", **spec}, created_at=T0, updated_at=T0
    )


async def test_a_model_round_trips_and_an_update_keeps_its_creation_time(store: Store):
    await store.put_model(_model("llama", replicas_min=1, labels={"team": "a"}))
    later = _model("llama", replicas_min=3)
    later.created_at = T0 + timedelta(days=1)
    later.updated_at = T0 + timedelta(days=1)
    await store.put_model(later)
    got = await store.get_model("llama")
    assert got.spec["replicas_min"] == 3
    assert got.created_at == T0 and got.updated_at == T0 + timedelta(days=1)
    assert await store.get_model("nope") is None


async def test_models_are_listed_by_name_and_removed(store: Store):
    for n in ("b", "a", "c"):
        await store.put_model(_model(n))
    assert [m.name for m in await store.list_models()] == ["a", "b", "c"]
    assert await store.delete_model("b") is True
    assert await store.delete_model("b") is False
    assert [m.name for m in await store.list_models()] == ["a", "c"]


async def test_replicas_are_kept_per_model_with_their_history(store: Store):
    doc = {"state": "ready", "history": [{"state": "placed"}, {"state": "ready"}]}
    await store.put_replica(ReplicaRecord(replica_id="r2", model="m1", doc=doc, updated_at=T0))
    await store.put_replica(ReplicaRecord(replica_id="r1", model="m1", doc={}, updated_at=T0))
    await store.put_replica(ReplicaRecord(replica_id="r3", model="m2", doc={}, updated_at=T0))
    assert [r.replica_id for r in await store.list_replicas()] == ["r1", "r2", "r3"]
    mine = await store.list_replicas("m1")
    assert [r.replica_id for r in mine] == ["r1", "r2"]
    assert mine[1].doc == doc
    assert await store.delete_replica("r1") and not await store.delete_replica("r1")


async def test_draining_is_an_overlay_a_reregistration_keeps(store: Store):
    node = NodeRecord(node_id="n", state_since=T0, registered_at=T0)
    await store.upsert_node(node)
    assert await store.set_node_draining("n", True)
    await store.upsert_node(node)
    assert (await store.get_node("n")).draining
    assert not await store.set_node_draining("ghost", True)


async def test_keys_keep_only_a_hash_and_note_their_last_use(store: Store):
    from gatewayd.store.records import KeyRecord

    rec = KeyRecord(
        key_id="k1",
        project_id="ten_000000000000search",
        name="ci",
        secret_sha256="ab" * 32,
        prefix="llmgw-abcd",
        models=["m"],
        created_at=T0,
    )
    await store.put_key(rec)
    await store.put_key(
        rec.model_copy(
            update={"key_id": "k2", "secret_sha256": "cd" * 32, "project_id": "ten_0000000000other"}
        )
    )
    assert [k.key_id for k in await store.list_keys()] == ["k1", "k2"]
    (only,) = await store.list_keys("ten_000000000000search")
    assert only.models == ["m"] and only.revoked_at is None
    await store.put_key(only.model_copy(update={"revoked_at": T0 + timedelta(hours=1)}))
    await store.touch_keys({"k1": T0 + timedelta(hours=2)})
    (again,) = await store.list_keys("ten_000000000000search")
    assert again.revoked_at == T0 + timedelta(hours=1)
    assert again.last_used_at == T0 + timedelta(hours=2)
