"""Alike nodes are planned once; fp8 is planned only on cards of compute capability 8.9+."""

from __future__ import annotations

from llmgw.modelplan.cache import PlanCache
from llmgw.modelplan.plan import HOSTS_NAMED, plan_for_inventories, plan_model
from llmgw.modelplan.shapes import bandwidth_step_gbs, group_shapes
from llmgw.placement import PlacementRequest, place
from tests.llmgw.model_facts import LLAMA_8B_Q4, LLAMA_70B_F16
from tests.llmgw.modelplan.conftest import load_inventory
from tests.llmgw.placement.cluster import node

FP8_ON_A100 = "fp8 weights need compute capability 8.9 or newer; NVIDIA A100-SXM4-40GB is 8.0"


def _fleet(n: int, fixture: str = "l4_24g_x4"):
    """n nodes of one recording, each with its own measured bandwidth and a few KiB less memory."""
    base = load_inventory(fixture)
    out = []
    for i in range(n):
        host = base.host.model_copy(
            update={
                "hostname": f"node-{i}",
                "mem_bandwidth_gbs": 100.0 + (i % 7) * 0.1,
                "memory_total_bytes": base.host.memory_total_bytes - i * 2**10,
            }
        )
        out.append(base.model_copy(update={"host": host}))
    return out


def test_nodes_whose_bandwidth_and_memory_differ_a_little_are_one_shape():
    # Guards: every node its own shape, 3 s of planning a decision at 10,000 nodes.
    shapes = group_shapes(_fleet(50))
    assert len(shapes) == 1
    ((shape, hosts),) = shapes.items()
    assert len(hosts) == 50 and shape.bandwidth_gbs == bandwidth_step_gbs(100.0)
    assert abs(bandwidth_step_gbs(103.7) - 103.7) / 103.7 <= 0.05


def test_a_layout_planned_for_a_fleet_names_a_few_hosts_and_counts_them_all():
    plan = plan_for_inventories(LLAMA_8B_Q4, "llama.cpp", 8192, 1, _fleet(100))
    best = plan.layouts[0]
    assert best.hosts == [f"node-{i}" for i in range(HOSTS_NAMED)]
    assert f"planned for 100 nodes alike; hosts names {HOSTS_NAMED} of them" in best.notes


def test_a_pass_over_the_same_nodes_plans_each_model_once():
    cache = PlanCache()
    fleet = _fleet(30)
    first = cache.plan(LLAMA_8B_Q4, "llama.cpp", 8192, 1, fleet)
    assert cache.plan(LLAMA_8B_Q4, "llama.cpp", 8192, 1, fleet) is first
    # A new list of the same nodes (the next pass) keeps the plan too.
    assert cache.plan(LLAMA_8B_Q4, "llama.cpp", 8192, 1, list(fleet)) is first
    assert cache.plans_made == 1
    # Another context is another plan; a node more is another grouping.
    cache.plan(LLAMA_8B_Q4, "llama.cpp", 4096, 1, fleet)
    cache.plan(LLAMA_8B_Q4, "llama.cpp", 8192, 1, [*fleet, load_inventory("h100_80g_x8")])
    assert cache.plans_made == 3


def test_fp8_on_cards_older_than_8_9_gives_no_layout_and_says_why():
    a100 = load_inventory("a100_40g_x2_nvlink")
    plan = plan_model(LLAMA_8B_Q4_BF16, engine="vllm", cards=a100.gpus, precision="fp8")
    assert not plan.layouts
    assert plan.refused == FP8_ON_A100
    # bf16 on the same cards is planned as before.
    assert plan_model(LLAMA_8B_Q4_BF16, engine="vllm", cards=a100.gpus, precision="bf16").layouts


def test_placement_refuses_an_a100_node_an_fp8_model_with_the_plans_words():
    nodes = [node("a100-pair", "a100_40g_x2_nvlink"), node("h100", "h100_80g_x8")]
    plan = plan_for_inventories(
        LLAMA_70B_F16, "vllm", 8192, 1, [n.inventory for n in nodes], precision="fp8"
    )
    assert {la.card_name for la in plan.layouts} == {"NVIDIA H100 80GB HBM3"}
    assert FP8_ON_A100 in plan.notes
    request = PlacementRequest(model="m", engine="vllm", plan=plan)
    decision = place(request, nodes)
    assert decision.placement.node_id == "h100"
    assert decision.reasons["a100-pair"] == FP8_ON_A100


# An 8 B model stored in bf16 (16 GB): fp8 would halve it.
LLAMA_8B_Q4_BF16 = LLAMA_8B_Q4.model_copy(
    update={"format": "safetensors", "quantisation": "BF16", "weights_bytes": 16_000_000_000}
)
