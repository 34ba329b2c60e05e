"""Labels and roles, end to end: agent.yaml's and an operator's, placement and its reasons.

A real control plane and real agents on recorded GPU inventories (fake
probes), the sim engine playing the model.
"""

from __future__ import annotations

import asyncio

import pytest

from llmgw.errors import UsageError
from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

GIB = 2**30
NODES = ("judge-box", "plain-box", "yaml-box")
READY_TRIES = 400


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        # Alike but for their labels: only labels decide where a model goes.
        for node_id, labels in (
            ("yaml-box", {"zone": "a"}),
            ("plain-box", {}),
            ("judge-box", {"llmgw.role": "judge"}),
        ):
            cfg = c.agent_config(node_id, fixture="l4_24g_x4")
            cfg.labels = labels
            await c.start_agent(node_id, cfg=cfg)

        await c.wait_nodes_ready(*NODES)
        yield c


def spec(name: str, labels: dict[str, str]) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/small.gguf",
        profiles=[
            ModelProfile(
                name="default",
                engine="sim",
                gpu=GpuNeed(count=1, min_memory_bytes=4 * GIB),
                startup_timeout_s=60,
            )
        ],
        replicas_min=1,
        replicas_max=1,
        slots=1,
        labels=labels,
    )


async def ready_on(cluster, model: str) -> str | None:
    async with cluster.admin() as admin:
        rs = (await admin.list_replicas(model)).replicas
    return next((r.node_id for r in rs if r.state == "ready"), None)


async def test_the_nodes_own_labels_are_shown_and_an_operators_win_over_them(cluster):
    async with cluster.admin() as admin:
        assert dict((await admin.get_node("yaml-box")).labels) == {"zone": "a"}
        view = await admin.label_node("yaml-box", {"zone": "b", "rack": "r7"})
        assert dict(view.labels) == {"zone": "b", "rack": "r7"}
        # Removing the operator's zone brings back agent.yaml's.
        view = await admin.label_node("yaml-box", remove=["zone"])
        assert dict(view.labels) == {"zone": "a", "rack": "r7"}
        assert dict((await admin.list_nodes()).nodes[2].labels) == {"zone": "a", "rack": "r7"}


async def test_a_label_only_agent_yaml_gives_cannot_be_removed_by_the_operator(cluster):
    async with cluster.admin() as admin:
        with pytest.raises(UsageError, match="zone=a comes from the node's agent.yaml"):
            await admin.label_node("yaml-box", remove=["zone"])
        with pytest.raises(UsageError, match="label key 'not a key'"):
            await admin.label_node("plain-box", {"not a key": "x"})
        assert dict((await admin.get_node("yaml-box")).labels) == {"zone": "a"}


async def test_a_zone_a_model_places_only_on_nodes_labelled_zone_a_and_says_why_not_elsewhere(
    cluster,
):
    async with cluster.admin() as admin:
        await admin.put_model(spec("zonal", {"zone": "a"}))
        explained = await admin.explain_placement("zonal")
    assert explained.placement.node_id == "yaml-box"
    reasons = {n.node_id: n.reason for n in explained.reasons}
    assert reasons["plain-box"] == "labels do not match: needs zone=a, node has none"
    assert reasons["judge-box"] == ("labels do not match: needs zone=a, node has llmgw.role=judge")
    assert await wait_for(lambda: ready_on(cluster, "zonal"), attempts=READY_TRIES) == "yaml-box"


async def test_a_model_waiting_for_a_label_is_placed_as_soon_as_an_operator_gives_it(cluster):
    async with cluster.admin() as admin:
        await admin.put_model(spec("west", {"zone": "w"}))
        refused = await admin.explain_placement("west")
        assert refused.placement is None
        assert {n.reason for n in refused.reasons if n.node_id != "judge-box"} == {
            "labels do not match: needs zone=w, node has none",
            "labels do not match: needs zone=w, node has zone=a",
        }

        await admin.label_node("plain-box", {"zone": "w"})

    # No restart, no wait for the pending replica's retry: the label is enough.
    assert await wait_for(lambda: ready_on(cluster, "west"), attempts=READY_TRIES) == "plain-box"
    async with cluster.admin() as admin:
        explained = await admin.explain_placement("west")
    reasons = {n.node_id: n.reason for n in explained.reasons}
    assert reasons["yaml-box"] == "labels do not match: needs zone=w, node has zone=a"


async def test_a_node_with_a_role_takes_only_a_model_that_asks_for_it(cluster):
    async with cluster.admin() as admin:
        await admin.put_model(spec("chat", {}))
        chat = await admin.explain_placement("chat")
        await admin.put_model(spec("judge", {"llmgw.role": "judge"}))
        judge = await admin.explain_placement("judge")
    assert chat.placement.node_id in ("plain-box", "yaml-box")
    chat_reasons = {n.node_id: n.reason for n in chat.reasons}
    assert chat_reasons["judge-box"] == "kept for role judge: the model does not ask for it"
    assert judge.placement.node_id == "judge-box"
    assert await wait_for(lambda: ready_on(cluster, "judge"), attempts=READY_TRIES) == "judge-box"


async def test_watchers_hear_of_a_nodes_new_labels(cluster):
    async with cluster.admin() as admin, cluster.admin() as watcher:
        subs = cluster.server.registry.watch._subs
        before = len(subs)
        events = watcher.watch(["nodes"])
        first = asyncio.ensure_future(anext(events))
        await wait_for(lambda: len(subs) > before)
        await admin.label_node("plain-box", {"rack": "r9"})

        event = await asyncio.wait_for(first, 10)
        # Heartbeats are "nodes" notices too: read on until the label shows.
        while not (event.key == "plain-box" and event.node and event.node.labels):
            event = await asyncio.wait_for(anext(events), 10)
        assert dict(event.node.labels) == {"rack": "r9"}
        await events.aclose()


async def test_an_operators_labels_outlive_the_nodes_reconnection(cluster):
    async with cluster.admin() as admin:
        await admin.label_node("yaml-box", {"rack": "r7"})
    agent, stop, task = next(a for a in cluster.agents if a[0].cfg.node_id == "yaml-box")
    stop.set()
    await asyncio.wait_for(task, 10)
    cluster.agents.remove((agent, stop, task))

    async def state(want):
        async with cluster.admin() as admin:
            return (await admin.get_node("yaml-box")).state == want

    await wait_for(lambda: state("not_ready"))
    await cluster.start_agent("yaml-box", cfg=agent.cfg)
    await wait_for(lambda: state("ready"))
    async with cluster.admin() as admin:
        assert dict((await admin.get_node("yaml-box")).labels) == {"zone": "a", "rack": "r7"}
