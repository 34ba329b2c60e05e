"""What a model needs of a card: weights, KV cache, the engine's own."""

from __future__ import annotations

import pytest

from llmgw.modelplan import memory
from llmgw.modelplan.memory import GIB
from llmgw.modelplan.types import ModelFacts

LLAMA_8B = ModelFacts(
    format="gguf",
    layers=32,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    trained_context=131072,
    weights_bytes=4_920_000_000,
)


def test_a_token_of_context_costs_a_key_and_a_value_per_layer_and_kv_head():
    # 2 × 32 layers × 8 KV heads × 128 × 2 bytes: Llama-3-8B's 128 KiB a token.
    assert memory.kv_bytes_per_token(LLAMA_8B) == 131072


def test_every_slot_holds_the_full_context():
    assert memory.kv_pool_bytes(LLAMA_8B, 8192, slots=4) == 4 * 8192 * 131072


def test_llama_cpp_keeps_a_gigabyte_and_vllm_two_and_a_fiftieth_of_the_weights():
    assert memory.engine_overhead_bytes("llama.cpp", 50 * GIB) == GIB
    assert memory.engine_overhead_bytes("sim", 50 * GIB) == GIB
    assert memory.engine_overhead_bytes("vllm", 50 * GIB) == 2 * GIB + GIB
    assert memory.engine_overhead_bytes("sglang", 100) == 2 * GIB + 2


def test_only_ninety_percent_of_a_card_is_planned_with():
    assert memory.usable_card_bytes(1000) == 900


@pytest.mark.parametrize(
    ("kv_heads", "tp", "allowed"),
    [
        (8, 2, True),
        (8, 4, True),
        (8, 8, True),
        (8, 16, True),
        (4, 8, True),
        (6, 4, False),
        (6, 2, True),
        (0, 8, True),
    ],
)
def test_the_tensor_width_divides_the_kv_heads_or_is_a_multiple_of_them(kv_heads, tp, allowed):
    facts = LLAMA_8B.model_copy(update={"kv_heads": kv_heads, "attention_heads": 48})
    assert memory.tensor_width_allowed(facts, tp) is allowed


def test_past_the_kv_heads_each_card_holds_a_copy_of_one():
    facts = LLAMA_8B.model_copy(update={"kv_heads": 4})
    need = memory.card_need(facts, engine="vllm", context=1000, cards=8)
    # A quarter of the pool on each of 8 cards, not an eighth.
    assert need.kv_bytes == memory.kv_pool_bytes(facts, 1000) // 4


def test_a_layer_split_gives_each_card_its_share_of_both():
    need = memory.card_need(LLAMA_8B, engine="llama.cpp", context=1000, cards=2, split="layer")
    assert need.weights_bytes == LLAMA_8B.weights_bytes // 2
    assert need.kv_bytes == memory.kv_pool_bytes(LLAMA_8B, 1000) // 2
    assert need.overhead_bytes == GIB


def test_the_context_that_fits_is_the_most_in_steps_of_256():
    usable = 10 * GIB
    ctx = memory.context_that_fits(
        LLAMA_8B, engine="llama.cpp", usable_bytes=usable, target_context=131072
    )
    assert ctx % 256 == 0
    fits = memory.card_need(LLAMA_8B, engine="llama.cpp", context=ctx).total_bytes
    over = memory.card_need(LLAMA_8B, engine="llama.cpp", context=ctx + 256).total_bytes
    assert fits <= usable < over


def test_a_context_that_fits_whole_is_kept_as_asked():
    ctx = memory.context_that_fits(
        LLAMA_8B, engine="llama.cpp", usable_bytes=80 * GIB, target_context=1000
    )
    assert ctx == 1000


def test_weights_that_leave_no_room_fit_no_context():
    assert (
        memory.context_that_fits(
            LLAMA_8B, engine="llama.cpp", usable_bytes=GIB, target_context=4096
        )
        == 0
    )


def test_the_cpu_needs_weights_pool_and_a_gigabyte():
    assert memory.cpu_need_bytes(LLAMA_8B, context=1000) == (
        LLAMA_8B.weights_bytes + 1000 * 131072 + GIB
    )
