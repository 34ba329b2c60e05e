"""How much memory a model needs: its weights, its KV cache, and the engine's own.

Pure arithmetic over ModelFacts; no I/O. Sizes are bytes; where they are shown
to people they are in GiB written "GB", as nvidia-smi and the reference's plan
output do (an 80 GB H100 has 79.6 of them, 90% of which is the "72 usable").
"""

from __future__ import annotations

from typing import Literal

from llmgw.modelplan.types import CardNeed, ModelFacts

GIB = 1 << 30

# Only 90% of a card is planned with: the rest is the driver's, the CUDA
# context's and fragmentation's. Apertus 70B with a 65536-token pool, then 8B
# with 131072, on a 24 GB card loaded their weights and failed to make their
# context on every start until this rule (reference, c22528c).
USABLE_FRACTION = 0.9

# llama.cpp's own memory beside weights and KV: compute buffers, the CUDA
# context. A gigabyte covered every model on the reference's 24 GB cards.
LLAMACPP_OVERHEAD_BYTES = 1 * GIB

# vLLM and SGLang hold more of their own (CUDA graphs, activations sized by
# the model): 2 GB and a fiftieth of the weights on the card
# (reference, docs/large-models.md "What a way needs").
TORCH_ENGINE_BASE_OVERHEAD_BYTES = 2 * GIB
TORCH_ENGINE_WEIGHTS_DIVISOR = 50

# A model on the CPU: the weights, the KV cache and a gigabyte for llama.cpp.
CPU_OVERHEAD_BYTES = 1 * GIB

# Contexts are planned in steps of 256 tokens: llama.cpp and vLLM both
# allocate the KV cache in blocks, and a round figure is easier to read.
CONTEXT_STEP_TOKENS = 256

# Engines that run a model on the CPU; vLLM and SGLang need GPUs.
CPU_ENGINES = ("llama.cpp", "sim")

Split = Literal["tensor", "layer"]


def kv_bytes_per_token(facts: ModelFacts) -> int:
    """The KV cache one token of context costs: a key and a value per layer per KV head."""
    return 2 * facts.layers * facts.kv_heads * facts.head_dim * facts.kv_bytes_per_element


def kv_pool_bytes(facts: ModelFacts, context: int, slots: int = 1) -> int:
    """The whole KV pool: every slot can hold the full context."""
    return kv_bytes_per_token(facts) * context * max(slots, 1)


def usable_card_bytes(memory_total_bytes: int) -> int:
    """What planning may use of a card (90% of it)."""
    return int(memory_total_bytes * USABLE_FRACTION)


def usable_host_bytes(memory_total_bytes: int) -> int:
    """What planning may use of a host's memory: the same margin, for the OS and page cache."""
    return int(memory_total_bytes * USABLE_FRACTION)


def engine_overhead_bytes(engine: str, card_weights_bytes: int) -> int:
    """The engine's own memory on a card that holds card_weights_bytes of weights."""
    if engine in ("vllm", "sglang"):
        return TORCH_ENGINE_BASE_OVERHEAD_BYTES + card_weights_bytes // TORCH_ENGINE_WEIGHTS_DIVISOR
    return LLAMACPP_OVERHEAD_BYTES


def kv_heads_per_card(kv_heads: int, tensor_parallel: int) -> int:
    """KV heads each card holds: its share, or past their number a copy of one."""
    if kv_heads <= 0:
        return 0
    return max(1, kv_heads // max(tensor_parallel, 1))


def tensor_width_allowed(facts: ModelFacts, tensor_parallel: int) -> bool:
    """Whether vLLM/SGLang can cut the model tensor_parallel wide.

    The cards split the KV heads among them, or past their number each holds a
    copy of one, so the width divides the KV heads or is a multiple of them:
    8 KV heads run 2, 4, 8 or 16 wide, not 12; Qwen3-235B has 4 and runs on 8
    (reference, docs/large-models.md). The attention heads must divide evenly
    too, which vLLM checks at start.
    """
    tp = tensor_parallel
    if tp <= 1:
        return True
    kv = facts.kv_heads
    if kv > 0 and kv % tp != 0 and tp % kv != 0:
        return False
    heads = facts.attention_heads
    return not (heads > 0 and heads % tp != 0)


def card_need(
    facts: ModelFacts,
    *,
    engine: str,
    context: int,
    slots: int = 1,
    cards: int = 1,
    split: Split = "tensor",
) -> CardNeed:
    """What each of `cards` cards holds for the model at this context.

    Tensor parallel cuts every layer: each card holds 1/N of the weights and
    its KV heads' share of the pool (a copy of one head when N passes them).
    A layer split gives each card a run of whole layers: 1/N of both.
    """
    n = max(cards, 1)
    weights = -(-facts.weights_bytes // n)  # ceil: a card holds the bigger share
    pool = kv_pool_bytes(facts, context, slots)
    if split == "tensor" and n > 1 and facts.kv_heads > 0:
        kv = -(-pool * kv_heads_per_card(facts.kv_heads, n) // facts.kv_heads)
    else:
        kv = -(-pool // n)
    return CardNeed(
        weights_bytes=weights,
        kv_bytes=kv,
        overhead_bytes=engine_overhead_bytes(engine, weights),
    )


def kv_share_per_token(facts: ModelFacts, *, cards: int, split: Split, slots: int) -> float:
    """Bytes of KV one card holds per token of context (all slots)."""
    per_token = kv_bytes_per_token(facts) * max(slots, 1)
    n = max(cards, 1)
    if split == "tensor" and n > 1 and facts.kv_heads > 0:
        return per_token * kv_heads_per_card(facts.kv_heads, n) / facts.kv_heads
    return per_token / n


def context_that_fits(
    facts: ModelFacts,
    *,
    engine: str,
    usable_bytes: int,
    target_context: int,
    slots: int = 1,
    cards: int = 1,
    split: Split = "tensor",
) -> int:
    """The longest context, up to target_context, whose pool fits beside the weights.

    A multiple of 256 tokens unless the target itself is shorter; 0 when the
    weights and the engine leave no room at all.
    """
    fixed = card_need(facts, engine=engine, context=0, slots=slots, cards=cards, split=split)
    room = usable_bytes - fixed.total_bytes
    if room < 0:
        return 0
    per_token = kv_share_per_token(facts, cards=cards, split=split, slots=slots)
    if per_token <= 0:
        return target_context
    fits = int(room // per_token)
    if fits >= target_context:
        return target_context
    return fits // CONTEXT_STEP_TOKENS * CONTEXT_STEP_TOKENS


def cpu_need_bytes(facts: ModelFacts, *, context: int, slots: int = 1) -> int:
    """Host memory a model on the CPU needs: weights, KV pool and a gigabyte."""
    return facts.weights_bytes + kv_pool_bytes(facts, context, slots) + CPU_OVERHEAD_BYTES


def cpu_context_that_fits(
    facts: ModelFacts, *, usable_bytes: int, target_context: int, slots: int = 1
) -> int:
    """The longest context, up to target_context, the host holds beside the weights."""
    room = usable_bytes - cpu_need_bytes(facts, context=0, slots=slots)
    if room < 0:
        return 0
    per_token = kv_bytes_per_token(facts) * max(slots, 1)
    if per_token <= 0:
        return target_context
    fits = room // per_token
    if fits >= target_context:
        return target_context
    return fits // CONTEXT_STEP_TOKENS * CONTEXT_STEP_TOKENS


def gb(n_bytes: float) -> str:
    """Bytes as people read them in plan notes: GiB written "GB", one decimal (two below 1)."""
    value = n_bytes / GIB
    return f"{value:.2f} GB" if value < 1 else f"{value:.1f} GB"


# Bytes a weight takes at the precisions vLLM and SGLang can load a model at.
PRECISION_BYTES = {"bf16": 2, "fp8": 1}
# Engines that quantize weights as they load them (--quantization fp8, --dtype).
QUANTIZING_ENGINES = ("vllm", "sglang")


def at_precision(facts: ModelFacts, precision: str) -> ModelFacts:
    """The model's facts with its weights at ``precision`` ("" leaves them as stored).

    A weight takes at most the precision's bytes: fp8 halves a bf16 model and
    quarters an fp32 one; a model stored smaller (fp8, 4-bit) stays as it is,
    since an engine does not widen quantized weights back. The KV cache keeps
    the engine's 16-bit default.
    """
    if not precision:
        return facts
    per_param = PRECISION_BYTES.get(precision)
    if per_param is None:
        raise ValueError(f"precision {precision!r}: one of " + ", ".join(PRECISION_BYTES))
    if facts.parameters <= 0 or facts.weights_bytes <= 0:
        return facts
    weights = min(facts.weights_bytes, facts.parameters * per_param)
    if weights == facts.weights_bytes:
        return facts
    active = facts.active_weights_bytes or facts.weights_bytes
    return facts.model_copy(
        update={
            "weights_bytes": weights,
            "active_weights_bytes": active * weights // facts.weights_bytes,
            "quantisation": precision.upper(),
        }
    )
