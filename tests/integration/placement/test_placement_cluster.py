"""Placement across agents with recorded GPU inventories, and draining a node."""

from __future__ import annotations

import json
import os

import pytest

from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

GIB = 2**30


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        await c.start_agent("h100-box", fixture="h100_80g_x8")
        await c.start_agent("l4-box", fixture="l4_24g_x4")

        await c.wait_nodes_ready("h100-box", "l4-box")
        yield c
        c.kill_engines()


def spec(name: str, *, gpus: int, per_card_gib: int, replicas: int = 1) -> ModelSpec:
    # The sim engine plays the model; the fake inventories play the cards.
    return ModelSpec(
        name=name,
        source="/models/big.gguf",
        profiles=[
            ModelProfile(
                name="default",
                engine="sim",
                gpu=GpuNeed(count=gpus, min_memory_bytes=per_card_gib * GIB),
                startup_timeout_s=60,
            )
        ],
        replicas_min=replicas,
        replicas_max=replicas,
        slots=1,
    )


async def replicas(cluster, model):
    async with cluster.admin() as admin:
        return list((await admin.list_replicas(model)).replicas)


async def ready(cluster, model, count=1):
    rs = [r for r in await replicas(cluster, model) if r.state == "ready"]
    return rs if len(rs) >= count else None


async def test_a_model_needing_two_80_gb_cards_goes_to_the_h100_node(cluster):
    async with cluster.admin() as admin:
        await admin.put_model(spec("big", gpus=2, per_card_gib=70))
        explained = await admin.explain_placement("big")
    assert explained.placement.node_id == "h100-box"
    assert list(explained.placement.gpu_indexes) == [0, 1]
    assert dict(explained.placement.per_gpu_bytes) == {0: 70 * GIB, 1: 70 * GIB}
    reasons = {n.node_id: n.reason for n in explained.reasons}
    assert "l4-box" in reasons and "GiB" in reasons["l4-box"]
    (r,) = await wait_for(lambda: ready(cluster, "big"), attempts=400)
    assert r.node_id == "h100-box" and list(r.gpu_indexes) == [0, 1]


async def test_a_model_that_fits_nowhere_is_refused_with_each_nodes_reason(cluster):
    async with cluster.admin() as admin:
        await admin.put_model(spec("huge", gpus=1, per_card_gib=200))
        explained = await admin.explain_placement("huge")
    assert explained.placement is None and explained.refused.startswith("no node can run it")
    reasons = {n.node_id: n.reason for n in explained.reasons}
    assert set(reasons) == {"h100-box", "l4-box"}
    assert all("GiB" in why for why in reasons.values())


async def test_draining_a_node_moves_its_replicas_before_stopping_them(cluster):
    async with cluster.admin() as admin:
        await admin.put_model(spec("small", gpus=1, per_card_gib=10))
    (first,) = await wait_for(lambda: ready(cluster, "small"), attempts=400)
    async with cluster.admin() as admin:
        view = await admin.drain_node(first.node_id)
        assert view.draining and view.cordoned

    async def moved():
        rs = await replicas(cluster, "small")
        live = [r for r in rs if r.state == "ready"]
        old = next((r for r in rs if r.replica_id == first.replica_id), None)
        if old is not None and old.state not in ("stopped",):
            return None
        return live if len(live) == 1 and live[0].node_id != first.node_id else None

    (moved_to,) = await wait_for(moved, attempts=600)
    other = {"h100-box": "l4-box", "l4-box": "h100-box"}[first.node_id]
    assert moved_to.node_id == other


async def test_gpu_memory_of_processes_not_ours_is_reported_as_foreign(cluster):
    async with cluster.admin() as admin:
        await admin.put_model(spec("small", gpus=1, per_card_gib=10))
    (r,) = await wait_for(lambda: ready(cluster, "small"), attempts=400)
    agent = next(a for a, _, _ in cluster.agents if a.cfg.node_id == r.node_id)
    gpu = r.gpu_indexes[0]
    uuid = next(g.uuid for g in agent.inventory.gpus if g.index == gpu)
    # NVML would list both: the replica's engine, and something else on the card
    # (here this test's process), as the fake probe reads them (agentd/discovery/fake.py).
    procs = agent.probe.procs_dir
    procs.mkdir(parents=True, exist_ok=True)
    for pid, used in ((r.pid, 9 * GIB), (os.getpid(), 3 * GIB)):
        entry = {"pid": pid, "cuda_visible_devices": uuid, "used_bytes_per_gpu": used}
        (procs / f"{pid}.json").write_text(json.dumps(entry))

    async def foreign():
        async with cluster.admin() as admin:
            node = await admin.get_node(r.node_id)
        sample = next((s for s in node.gpu_samples if s.index == gpu), None)
        return sample if sample and sample.memory_foreign_bytes else None

    sample = await wait_for(foreign, attempts=200)
    assert sample.memory_foreign_bytes == 3 * GIB  # the engine's 9 GiB is ours, not foreign


def test_with_no_driver_nvml_lists_no_gpu_processes():
    from agentd.discovery import nvml

    assert nvml.processes() == {}
