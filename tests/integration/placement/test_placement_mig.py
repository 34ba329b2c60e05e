"""MIG instances from a recorded inventory are placed one model each, on a real control plane.

A real gatewayd in-process and a real agent whose probe reports
tests/fixtures/hardware/a100_80g_mig.json: one A100 80 GB in MIG mode
(GPU 0) split into seven 1g.10gb instances, units 1-7. The sim engine plays
the models.
"""

from __future__ import annotations

import pytest

from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

GIB = 2**30
NODE = "mig-box"
INSTANCES = {1, 2, 3, 4, 5, 6, 7}


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        await c.start_agent(NODE, fixture="a100_80g_mig")

        await c.wait_nodes_ready(NODE)
        yield c
        c.kill_engines()


def spec(name: str, *, per_card_gib: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/small.gguf",
        profiles=[
            ModelProfile(
                name="default",
                engine="sim",
                gpu=GpuNeed(count=1, min_memory_bytes=per_card_gib * GIB),
                startup_timeout_s=60,
            )
        ],
        replicas_min=1,
        replicas_max=1,
        slots=1,
    )


async def all_ready(cluster, names):
    async with cluster.admin() as admin:
        found = []
        for name in names:
            ready = [r for r in (await admin.list_replicas(name)).replicas if r.state == "ready"]
            if not ready:
                return None
            found += ready
    return found


async def test_small_models_go_one_per_mig_instance_and_one_too_large_is_refused_saying_why(
    cluster,
):
    small = [f"small-{i}" for i in range(7)]
    async with cluster.admin() as admin:
        for name in small:
            await admin.put_model(spec(name, per_card_gib=4))

    replicas = await wait_for(lambda: all_ready(cluster, small), attempts=600)

    # Each on an instance of its own; never the split card itself, never two on one.
    units = [tuple(r.gpu_indexes) for r in replicas]
    assert all(r.node_id == NODE for r in replicas)
    assert sorted(u for (u,) in units) == sorted(INSTANCES)

    async with cluster.admin() as admin:
        await admin.put_model(spec("one-more", per_card_gib=4))
        await admin.put_model(spec("too-large", per_card_gib=20))
        full = await admin.explain_placement("one-more")
        large = await admin.explain_placement("too-large")

    # 4 GiB of an instance's 9.75 are free by memory alone: one replica each.
    assert full.placement is None
    (why,) = [n.reason for n in full.reasons if n.node_id == NODE]
    assert why.startswith("every card it could use is taken (a MIG instance holds one replica)")
    assert "GPU 0 is split into MIG instances (7 × 1g.10gb: GPUs 1-7)" in why

    assert large.placement is None
    assert large.refused == "no node can run it: 1 without a suitable GPU"
    (why,) = [n.reason for n in large.reasons if n.node_id == NODE]
    assert why.startswith(
        "no GPU with 20.0 GiB or more: has 7 × NVIDIA A100-SXM4-80GB MIG 1g.10gb (cc 8.0, 9.8 GiB)"
    )
    assert "GPU 0 is split into MIG instances" in why
