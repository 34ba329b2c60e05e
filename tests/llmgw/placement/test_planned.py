"""Plans as model planning makes them: layouts for named kinds of card, ranked by speed.

Planning fits each layout's context to one kind of card (90% of its memory),
so a layout goes only on cards of the name it was planned for. The last tests
take their plans from llmgw.modelplan itself, over the recorded inventories.
"""

from __future__ import annotations

from llmgw.modelplan.plan import plan_for_inventories
from llmgw.placement import NodeIndex, PlacementRequest, place
from tests.llmgw.model_facts import LLAMA_8B_Q4, LLAMA_70B_F16
from tests.llmgw.placement.cluster import (
    A100,
    CPU,
    FIXTURE_OF,
    GB,
    H100,
    L4,
    RTX,
    cluster,
    gpu_layout,
    inventory,
    node,
    on,
    request,
)

H100_NAME = "NVIDIA H100 80GB HBM3"
L4_NAME = "NVIDIA L4"


def test_a_layout_planned_for_h100s_is_not_placed_on_other_cards_that_would_hold_it():
    req = request(on(H100_NAME, gpu_layout(1, 30 * GB)))

    decision = place(req, cluster(dgx_h100_01={"state": "not_ready"}))

    assert decision.placement is None
    assert decision.reasons[A100] == (
        "the plan has no layout for its cards "
        "(2 × NVIDIA A100-SXM4-40GB (cc 8.0, 40.0 GiB)); "
        "its layouts are for NVIDIA H100 80GB HBM3"
    )
    assert decision.refused == (
        "no node can run it: 1 not ready, 1 cannot run vllm, 3 without a suitable GPU"
    )


def test_each_node_takes_the_layout_planned_for_its_own_cards():
    req = request(on(H100_NAME, gpu_layout(1, 60 * GB)), on(L4_NAME, gpu_layout(4, 18 * GB)))

    decision = place(req, cluster(dgx_h100_01={"state": "not_ready"}))

    p = decision.placement
    assert (p.node_id, p.layout_index, p.gpu_indexes) == (L4, 1, [0, 1, 2, 3])
    assert p.per_gpu_bytes == dict.fromkeys([0, 1, 2, 3], 18 * GB)


def test_the_planners_70b_goes_to_the_h100s_with_tensor_parallel_and_nothing_else_fits():
    plan = plan_for_inventories(
        LLAMA_70B_F16, "vllm", 32768, 1, [inventory(f) for f in FIXTURE_OF.values()]
    )
    first = plan.layouts[0]

    decision = place(PlacementRequest(model="llama-70b", engine="vllm", plan=plan), cluster())

    p = decision.placement
    assert (p.node_id, p.layout_index) == (H100, 0)
    assert p.gpu_indexes == list(range(first.gpus))
    assert p.per_gpu_bytes == dict.fromkeys(p.gpu_indexes, first.per_card.total_bytes)
    assert p.score.nvlinked
    for name in (A100, L4, RTX):
        assert decision.reasons[name].startswith("the plan has no layout for its cards")


def test_the_planners_small_model_fills_a_used_l4_before_opening_the_empty_h100s():
    inventories = [inventory(f) for f in FIXTURE_OF.values()]
    plan = plan_for_inventories(
        LLAMA_8B_Q4, "llama.cpp", 8192, 1, inventories, cpu_bandwidth_gbs_by_host={CPU: 40.0}
    )
    req = PlacementRequest(model="llama-8b", engine="llama.cpp", plan=plan)

    # On an idle cluster the plan's ranking decides: its fastest card.
    assert place(req, cluster()).placement.node_id == H100

    busy_l4 = cluster(g2_l4_node_1={"gpu_used_bytes": {2: 10 * GB}})
    decision = place(req, busy_l4)

    p = decision.placement
    assert (p.node_id, p.gpu_indexes) == (L4, [2])
    assert p.per_gpu_bytes == {2: plan.layouts[p.layout_index].per_card.total_bytes}
    assert "pack before spread" in decision.reasons[H100]


def test_the_planners_tensor_parallel_2_on_the_recorded_a100_pair_lands_on_its_nvlink_pair():
    # 50 GB of weights: more than one 40 GB card holds, so TP 2 across the bridged pair.
    facts = LLAMA_70B_F16.model_copy(update={"weights_bytes": 50_000_000_000})
    plan = plan_for_inventories(facts, "vllm", 8192, 1, [inventory(FIXTURE_OF[A100])])
    req = PlacementRequest(model="mid", engine="vllm", plan=plan)
    assert plan.layouts[0].tensor_parallel == 2
    # Beside it, the same cards without the bridge: the linked pair must win.
    unbridged = inventory(FIXTURE_OF[A100])
    unbridged.gpus = [g.model_copy(update={"nvlink_peers": []}) for g in unbridged.gpus]

    for way in (list, NodeIndex):
        decision = place(req, way([node("a100-bare", inventory=unbridged), node(A100)]))

        p = decision.placement
        assert (p.node_id, p.gpu_indexes, p.layout.tensor_parallel) == (A100, [0, 1], 2)
        assert p.score.nvlinked
        assert decision.reasons["a100-bare"] == (
            "fits on GPUs [0, 1] but scored lower "
            "(its cards are not joined by NVLink; those on a100-pair are)"
        )
