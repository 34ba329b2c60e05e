"""MIG: a card split into instances is placed through them, one replica each, on one card.

The recording (tests/fixtures/hardware/a100_80g_mig.json) is an A100 80 GB in
MIG mode, GPU 0, split into seven 1g.10gb instances numbered 1-7 after it,
as NVML discovery reports them.
"""

from __future__ import annotations

import pytest

from llmgw.modelplan.plan import plan_for_inventories
from llmgw.placement import NodeIndex, PlacementRequest, place
from tests.llmgw.model_facts import LLAMA_8B_Q4, LLAMA_70B_F16
from tests.llmgw.placement.cluster import GIB, H100, gpu_layout, inventory, node, request

MIG_NODE = "a100-mig"
INSTANCE_BYTES = 9984 * 2**20
NOTE = (
    "GPU 0 is split into MIG instances (7 × 1g.10gb: GPUs 1-7); "
    "a MIG instance takes one replica on one card, never a layout across cards"
)


def mig(**fields):
    return node(MIG_NODE, fixture="a100_80g_mig", **fields)


# Both ways of deciding must say the same; the index is what the reconciler uses.
WAYS = pytest.mark.parametrize("way", [list, NodeIndex], ids=["scan", "index"])


@WAYS
def test_a_small_model_goes_on_a_mig_instance_never_on_the_card_split_into_them(way):
    p = place(request(gpu_layout(1, 4 * GIB)), way([mig()])).placement

    assert p.node_id == MIG_NODE and p.gpu_indexes == [1]


@WAYS
def test_seven_small_models_take_one_instance_each_and_an_eighth_is_refused_saying_why(way):
    nodes = way([mig()])
    by_id = {n.node_id: n for n in nodes}
    taken = []
    for i in range(7):
        p = place(request(gpu_layout(1, 4 * GIB), model=f"small-{i}"), nodes).placement
        by_id[p.node_id].reserve(p.per_gpu_bytes, p.host_memory_bytes)
        taken.append(p.gpu_indexes[0])

    eighth = place(request(gpu_layout(1, 4 * GIB), model="small-7"), nodes)

    # 4 GiB of 9.75 would leave room for another by memory alone: one replica each.
    assert taken == [1, 2, 3, 4, 5, 6, 7]
    assert eighth.placement is None
    assert eighth.reasons[MIG_NODE] == (
        f"every card it could use is taken (a MIG instance holds one replica), "
        f"needs 4.0 GiB; {NOTE}"
    )


@WAYS
def test_a_model_too_large_for_one_instance_is_refused_saying_the_card_is_split(way):
    decision = place(request(gpu_layout(1, 20 * GIB)), way([mig()]))

    assert decision.placement is None
    assert decision.refused == (
        "no node can run it: 1 short of GPU memory (largest free card 9.8 GiB, needs 20.0 GiB)"
    )
    assert decision.reasons[MIG_NODE] == f"GPU 1 has 9.8 GiB free, needs 20.0 GiB; {NOTE}"


@WAYS
def test_tensor_parallel_never_spans_mig_instances(way):
    decision = place(request(gpu_layout(2, 4 * GIB)), way([mig()]))

    assert decision.placement is None
    assert decision.reasons[MIG_NODE] == f"has no suitable GPU; {NOTE}"


def test_a_profile_asking_for_more_memory_than_an_instance_has_is_filtered_out_saying_so():
    decision = place(request(gpu_layout(1, 4 * GIB), min_memory_bytes=20 * GIB), [mig()])

    assert decision.reasons[MIG_NODE] == (
        "no GPU with 20.0 GiB or more: has 7 × NVIDIA A100-SXM4-80GB MIG 1g.10gb "
        f"(cc 8.0, 9.8 GiB); {NOTE}"
    )


def test_an_instance_holding_anything_has_nothing_free():
    n = mig(gpu_used_bytes={2: 512 * 2**20})

    assert (n.free_bytes(1), n.free_bytes(2)) == (INSTANCE_BYTES, 0)
    assert n.free_bytes(0) == 0  # the split card itself is not handed out


def test_a_card_in_mig_mode_with_no_instances_made_has_nothing_to_place_on():
    inv = inventory("a100_80g_mig")
    inv.gpus = inv.gpus[:1]

    decision = place(request(gpu_layout(1, 4 * GIB)), [node("bare", inventory=inv)])

    assert decision.reasons["bare"] == (
        "has no GPU to place on: GPU 0 is in MIG mode with no instances made; "
        "a MIG instance takes one replica on one card, never a layout across cards"
    )


def test_the_planner_plans_for_one_instance_and_placement_takes_one():
    inv = inventory("a100_80g_mig")
    plan = plan_for_inventories(LLAMA_8B_Q4, "llama.cpp", 8192, 1, [inv])

    gpu = [la for la in plan.layouts if la.kind == "gpu"]
    assert [(la.card_name, la.gpus) for la in gpu] == [("NVIDIA A100-SXM4-80GB MIG 1g.10gb", 1)]
    p = place(PlacementRequest(model="llama-8b", engine="llama.cpp", plan=plan), [mig()]).placement
    assert (p.node_id, p.gpu_indexes, p.layout.kind) == (MIG_NODE, [1], "gpu")


def test_a_model_larger_than_an_instance_is_planned_for_the_whole_cards_elsewhere():
    facts = LLAMA_70B_F16.model_copy(update={"weights_bytes": 30_000_000_000})
    plan = plan_for_inventories(
        facts, "vllm", 8192, 1, [inventory("a100_80g_mig"), inventory("h100_80g_x8")]
    )

    decision = place(PlacementRequest(model="big", engine="vllm", plan=plan), [mig(), node(H100)])

    assert decision.placement.node_id == H100
    assert decision.reasons[MIG_NODE].startswith("the plan has no layout for its cards")
    assert decision.reasons[MIG_NODE].endswith(NOTE)
