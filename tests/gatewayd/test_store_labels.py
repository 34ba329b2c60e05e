"""Node labels in the store, on SQLite and on a real PostgreSQL alike.

A node's labels have two homes: its agent.yaml's (from Register, replaced at
each registration) and an operator's (ctl node label, kept across them).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gatewayd.store import NodeRecord, Store

T0 = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)


def _node(node_id: str = "gpu-01", **changes) -> NodeRecord:
    fields = {
        "node_id": node_id,
        "state": "ready",
        "state_since": T0,
        "registered_at": T0 - timedelta(minutes=1),
    }
    return NodeRecord(**(fields | changes))


async def test_a_node_keeps_its_own_labels_and_an_operators_apart(store: Store):
    await store.upsert_node(_node(labels={"zone": "a", "llmgw.role": "judge"}))
    assert await store.set_node_labels("gpu-01", {"rack": "r7", "zone": "b"}) is True

    got = await store.get_node("gpu-01")

    assert got.labels == {"zone": "a", "llmgw.role": "judge"}
    assert got.operator_labels == {"rack": "r7", "zone": "b"}
    assert [n.operator_labels for n in await store.list_nodes()] == [{"rack": "r7", "zone": "b"}]


async def test_re_registering_replaces_the_nodes_labels_but_keeps_the_operators(store: Store):
    await store.upsert_node(_node(labels={"zone": "a"}))
    await store.set_node_labels("gpu-01", {"rack": "r7"})

    # The agent comes back with another agent.yaml; its record knows no operator labels.
    await store.upsert_node(_node(labels={"zone": "c"}, operator_labels={}))

    got = await store.get_node("gpu-01")
    assert got.labels == {"zone": "c"}
    assert got.operator_labels == {"rack": "r7"}


async def test_a_new_node_starts_with_the_operator_labels_its_record_carries(store: Store):
    await store.upsert_node(_node(operator_labels={"zone": "a"}))

    assert (await store.get_node("gpu-01")).operator_labels == {"zone": "a"}


async def test_labelling_an_unknown_node_returns_false(store: Store):
    assert await store.set_node_labels("nope", {"zone": "a"}) is False


async def test_clearing_the_operator_labels_leaves_none(store: Store):
    await store.upsert_node(_node())
    await store.set_node_labels("gpu-01", {"zone": "a"})
    await store.set_node_labels("gpu-01", {})

    got = await store.get_node("gpu-01")
    assert (got.labels, got.operator_labels) == ({}, {})
