"""Planning a model on the recorded nodes: which layouts fit, best first, or why none."""

from __future__ import annotations

import pytest

from llmgw.errors import UsageError
from llmgw.modelplan import bandwidth, memory
from llmgw.modelplan.memory import GIB
from llmgw.modelplan.plan import card_classes, plan_for_inventories, plan_model
from llmgw.modelplan.types import ModelFacts, Plan
from tests.llmgw.model_facts import LLAMA_8B_Q4, LLAMA_70B_F16
from tests.llmgw.modelplan.conftest import load_inventory

H100_X8 = load_inventory("h100_80g_x8")
L4_X4 = load_inventory("l4_24g_x4")
RTX6000 = load_inventory("rtx6000_24g_x1")
CPU_16C = load_inventory("cpu_only_16c")


# Qwen3-235B-A22B in FP8: 94 layers, only 4 KV heads, 128 experts of which 8 run.
QWEN3_235B_FP8 = ModelFacts(
    format="safetensors",
    architecture="qwen3_moe",
    layers=94,
    attention_heads=64,
    kv_heads=4,
    head_dim=128,
    trained_context=262144,
    quantisation="FP8",
    weights_bytes=236_000_000_000,
    experts=128,
    experts_used=8,
    active_weights_bytes=23_000_000_000,
)


def test_a_70b_in_16_bits_needs_tensor_parallel_4_on_the_h100_node():
    plan = plan_model(LLAMA_70B_F16, engine="vllm", context=32768, cards=H100_X8.gpus)
    best = plan.layouts[0]
    assert (best.kind, best.gpus, best.tensor_parallel) == ("gpu", 4, 4)
    assert best.card_name == "NVIDIA H100 80GB HBM3"
    assert best.context == plan.context == 32768
    # Each card: a quarter of the weights, its 2 of 8 KV heads, vLLM's 2 GB + 1/50.
    weights = 141_000_000_000 // 4
    kv = 32768 * (2 * 80 * 8 * 128 * 2) * 2 // 8
    assert best.per_card is not None
    assert best.per_card.weights_bytes == weights
    assert best.per_card.kv_bytes == kv
    assert best.per_card.overhead_bytes == 2 * GIB + weights // 50
    assert best.per_card.total_bytes <= memory.usable_card_bytes(85520809984)
    assert not best.expert_parallel
    assert "over NVLink" in " ".join(best.notes)


def test_the_70b_does_not_fit_on_one_card_and_eight_are_faster_than_four():
    plan = plan_model(LLAMA_70B_F16, engine="vllm", context=32768, cards=H100_X8.gpus)
    assert all(la.gpus > 1 for la in plan.layouts)
    by_width = {la.tensor_parallel: la for la in plan.layouts}
    assert by_width[8].tokens_per_s > by_width[4].tokens_per_s
    # Two cards hold the weights but not the whole context asked for: after.
    assert by_width[2].context < 32768
    assert [la.tensor_parallel for la in plan.layouts] == [4, 8, 2]


def test_a_two_card_need_goes_to_tensor_parallel_2_on_the_h100_node():
    facts = LLAMA_70B_F16.model_copy(update={"weights_bytes": 120_000_000_000})
    plan = plan_model(facts, engine="vllm", context=8192, cards=H100_X8.gpus)
    best = plan.layouts[0]
    assert (best.gpus, best.tensor_parallel, best.context) == (2, 2, 8192)
    assert best.per_card.weights_bytes == 60_000_000_000
    assert best.tokens_per_s == pytest.approx(
        bandwidth.gpu_tokens_per_s(
            120_000_000_000, 3350, tensor_parallel=2, layers=80, nvlink=True
        ),
        abs=0.1,
    )


def test_an_8b_q4_fits_one_l4():
    plan = plan_model(LLAMA_8B_Q4, engine="llama.cpp", context=8192, cards=L4_X4.gpus)
    best = plan.layouts[0]
    assert (best.kind, best.gpus, best.context) == ("gpu", 1, 8192)
    assert best.card_name == "NVIDIA L4"
    assert best.per_card.weights_bytes == LLAMA_8B_Q4.weights_bytes
    assert best.per_card.kv_bytes == 8192 * 131072
    assert best.per_card.overhead_bytes == GIB
    assert best.tokens_per_s == pytest.approx(
        bandwidth.gpu_tokens_per_s(LLAMA_8B_Q4.weights_bytes, 300), abs=0.1
    )
    # One card holds it all: a layer split over more would be no faster.
    assert [la.gpus for la in plan.layouts] == [1]


def test_the_trained_context_is_capped_to_one_card_and_the_cards_that_hold_it_are_said():
    plan = plan_model(LLAMA_8B_Q4, engine="llama.cpp", cards=L4_X4.gpus)
    best, whole = plan.layouts[0], plan.layouts[1]
    assert best.gpus == 1 and best.context < 131072 and best.context % 256 == 0
    assert "context shrunk from 131072" in " ".join(best.notes)
    assert (whole.gpus, whole.tensor_parallel, whole.context) == (2, 1, 131072)
    assert "2 × NVIDIA L4 hold the whole 131072" in plan.notes


def test_a_context_asked_for_is_kept_whole_on_more_cards_before_it_is_shrunk():
    plan = plan_model(LLAMA_8B_Q4, engine="llama.cpp", context=131072, cards=L4_X4.gpus)
    assert (plan.layouts[0].gpus, plan.layouts[0].context) == (2, 131072)
    assert "layers over 2 cards" in " ".join(plan.layouts[0].notes)


def test_an_oversize_context_is_shrunk_to_what_fits_and_said():
    facts = LLAMA_8B_Q4.model_copy(update={"weights_bytes": 16_000_000_000})
    plan = plan_model(facts, engine="llama.cpp", context=131072, cards=RTX6000.gpus)
    best = plan.layouts[0]
    assert best.gpus == 1
    assert 2048 <= best.context < 131072 and best.context % 256 == 0
    usable = memory.usable_card_bytes(RTX6000.gpus[0].memory_total_bytes)
    need = memory.card_need(facts, engine="llama.cpp", context=best.context)
    more = memory.card_need(facts, engine="llama.cpp", context=best.context + 256)
    assert need.total_bytes <= usable < more.total_bytes
    assert f"context shrunk from 131072 to {best.context} tokens" in best.notes[0]
    assert plan.context == best.context
    assert any("no layout here holds a context of 131072" in n for n in plan.notes)


def test_a_context_past_the_trained_one_is_refused():
    facts = LLAMA_8B_Q4.model_copy(update={"trained_context": 32768})
    plan = plan_model(facts, engine="llama.cpp", context=65536, cards=L4_X4.gpus)
    assert plan.refused == "context 65536 is past the model's trained 32768"
    assert plan.layouts == []


def test_weights_too_big_anywhere_are_refused_saying_what_they_need():
    facts = LLAMA_70B_F16.model_copy(update={"weights_bytes": 1_400_000_000_000})
    plan = plan_model(facts, engine="vllm", cards=H100_X8.gpus)
    assert plan.layouts == []
    assert "fit nowhere here" in plan.refused
    assert "the most these cards hold is" in plan.refused
    assert "(8 × NVIDIA H100 80GB HBM3)" in plan.refused
    # 1.4 TB over 71.7 GB usable cards: 32 wide, the next width past 16.
    assert "it needs 32 × NVIDIA H100 80GB HBM3" in plan.refused


def test_a_model_of_experts_spreads_its_experts_and_runs_past_its_kv_heads():
    plan = plan_model(QWEN3_235B_FP8, engine="vllm", context=32768, cards=H100_X8.gpus)
    widths = [la.tensor_parallel for la in plan.layouts]
    assert widths[0] == 4
    assert 8 in widths  # 8 cards for 4 KV heads: a multiple of them
    eight = next(la for la in plan.layouts if la.tensor_parallel == 8)
    assert eight.expert_parallel
    assert any("copy of one of the model's 4 KV heads" in n for n in eight.notes)
    assert any("--enable-expert-parallel" in n for n in eight.notes)


def test_a_tensor_width_that_does_not_suit_the_kv_heads_is_not_offered():
    facts = LLAMA_70B_F16.model_copy(update={"kv_heads": 6, "attention_heads": 48})
    plan = plan_model(facts, engine="vllm", context=4096, cards=H100_X8.gpus)
    assert [la.tensor_parallel for la in plan.layouts] == [2]


def test_a_small_gguf_runs_on_the_cpu_at_the_measured_bandwidth():
    facts = LLAMA_8B_Q4.model_copy(update={"weights_bytes": 1_120_000_000})
    plan = plan_model(
        facts,
        engine="llama.cpp",
        context=8192,
        host_memory_bytes=CPU_16C.host.memory_total_bytes,
        cpu_bandwidth_gbs=24.9,
    )
    (cpu,) = plan.layouts
    assert cpu.kind == "cpu" and cpu.gpus == 0 and cpu.per_card is None
    assert cpu.host_memory_bytes == 1_120_000_000 + 8192 * 131072 + GIB
    assert cpu.tokens_per_s == pytest.approx(1 / (1_120_000_000 / (24.9e9 * 0.68) + 0.005), abs=0.1)


def test_the_cpu_without_a_measured_bandwidth_says_it_has_no_figure():
    plan = plan_model(
        LLAMA_8B_Q4,
        engine="llama.cpp",
        context=8192,
        host_memory_bytes=CPU_16C.host.memory_total_bytes,
    )
    assert plan.layouts[0].tokens_per_s == 0.0
    assert "not measured yet" in plan.layouts[0].notes[0]


def test_the_cpu_comes_after_any_card():
    plan = plan_model(
        LLAMA_8B_Q4,
        engine="llama.cpp",
        context=8192,
        cards=L4_X4.gpus,
        host_memory_bytes=L4_X4.host.memory_total_bytes,
        cpu_bandwidth_gbs=100.0,
    )
    assert [la.kind for la in plan.layouts] == ["gpu", "cpu"]


def test_vllm_is_not_planned_on_a_cpu():
    plan = plan_model(
        LLAMA_8B_Q4,
        engine="vllm",
        context=8192,
        host_memory_bytes=CPU_16C.host.memory_total_bytes,
    )
    assert plan.layouts == []
    assert "vllm needs GPUs" in plan.refused


def test_a_model_too_big_for_the_cpu_says_how_much_it_holds():
    plan = plan_model(
        LLAMA_70B_F16,
        engine="llama.cpp",
        context=8192,
        host_memory_bytes=CPU_16C.host.memory_total_bytes,
    )
    assert "do not fit in the CPU's 56.5 GB usable" in plan.refused


def test_a_card_not_in_the_table_is_estimated_at_the_default_and_said():
    card = RTX6000.gpus[0].model_copy(update={"name": "Imaginary X1"})
    plan = plan_model(LLAMA_8B_Q4, engine="llama.cpp", context=8192, cards=[card])
    assert "not in the bandwidth table" in plan.layouts[0].notes[0]
    assert plan.layouts[0].tokens_per_s == pytest.approx(
        bandwidth.gpu_tokens_per_s(LLAMA_8B_Q4.weights_bytes, 300), abs=0.1
    )


def test_l4_cards_without_nvlink_pay_pcie_all_reduces():
    plan = plan_model(
        LLAMA_70B_F16.model_copy(update={"weights_bytes": 60_000_000_000}),
        engine="vllm",
        context=4096,
        cards=L4_X4.gpus,
    )
    four = next(la for la in plan.layouts if la.tensor_parallel == 4)
    assert "without NVLink" in four.notes[0]


def test_bad_input_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown engine"):
        plan_model(LLAMA_8B_Q4, engine="ollama")
    with pytest.raises(UsageError, match="slots"):
        plan_model(LLAMA_8B_Q4, engine="vllm", slots=0)


def test_a_model_of_unknown_size_is_refused():
    facts = LLAMA_8B_Q4.model_copy(update={"weights_bytes": 0})
    plan = plan_model(facts, engine="llama.cpp", cards=L4_X4.gpus)
    assert "not known" in plan.refused


def test_a_plan_round_trips_through_json():
    plan = plan_model(LLAMA_70B_F16, engine="vllm", context=32768, cards=H100_X8.gpus)
    assert Plan.model_validate_json(plan.model_dump_json()) == plan


def test_every_node_shape_is_planned_once_and_names_its_nodes(inventories):
    twin = L4_X4.model_copy(deep=True)
    twin.host.hostname = "g2-l4-node-2"
    plan = plan_for_inventories(
        LLAMA_8B_Q4,
        "llama.cpp",
        8192,
        1,
        # The MIG node's planning is tested with placement (tests/llmgw/placement/test_mig.py).
        [*(inv for name, inv in inventories.items() if name != "a100_80g_mig"), twin],
        cpu_bandwidth_gbs_by_host={"cpu-16c": 40.0},
    )
    gpu = [la for la in plan.layouts if la.kind == "gpu"]
    # One card of each kind, fastest first.
    assert [la.card_name for la in gpu] == [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-40GB",
        "Quadro RTX 6000",
        "NVIDIA L4",
    ]
    l4 = gpu[-1]
    assert l4.hosts == ["g2-l4-node-1", "g2-l4-node-2"]
    cpu = [la for la in plan.layouts if la.kind == "cpu"]
    assert cpu[0].hosts == ["cpu-16c"] and cpu[0].tokens_per_s > 0
    assert plan.layouts[-1].kind == "cpu"


def test_a_model_no_node_holds_is_refused_by_the_biggest_node():
    facts = LLAMA_70B_F16.model_copy(update={"weights_bytes": 1_400_000_000_000})
    plan = plan_for_inventories(
        facts, "vllm", 0, 1, [load_inventory(n) for n in ("l4_24g_x4", "h100_80g_x8")]
    )
    assert "NVIDIA H100 80GB HBM3" in plan.refused


def test_a_context_past_the_trained_one_is_refused_for_every_node():
    facts = LLAMA_8B_Q4.model_copy(update={"trained_context": 32768})
    plan = plan_for_inventories(facts, "llama.cpp", 65536, 1, [L4_X4, CPU_16C])
    assert plan.refused == "context 65536 is past the model's trained 32768"


def test_nvlink_counts_only_cards_all_joined_to_each_other():
    # Two bridged pairs are not a group of four: TP 4 across them crosses PCIe.
    pairs = [
        card.model_copy(update={"index": i, "nvlink_peers": [i ^ 1]})
        for i, card in enumerate(L4_X4.gpus)
    ]
    (l4,) = card_classes(pairs)
    assert l4.nvlink_group == 2
    (h100,) = card_classes(H100_X8.gpus)
    assert h100.nvlink_group == 8
    (plain,) = card_classes(L4_X4.gpus)
    assert plain.nvlink_group == 0
