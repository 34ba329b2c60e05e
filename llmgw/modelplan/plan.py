"""Which layouts could run a model on the cards at hand, best first, or why none can.

Pure: plain functions over ModelFacts, GpuInfo and Inventory; no I/O. The
order of the ways to run a model (reference, docs/large-models.md), the first
that fits:

1. one card;
2. several cards of one node: tensor parallel for vLLM and SGLang (the width
   divides the KV heads or is a multiple of them; a model of experts spreads
   its experts, --enable-expert-parallel), a layer split for llama.cpp;
3. the CPU, for llama.cpp (and sim), in the host's memory.

Fewest cards first, then the fastest. A pool too big for the layout is shrunk
to what fits and said; weights that fit nowhere are refused, saying what the
cards hold at most and what the model would need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from llmgw.catalog.model import ENGINES, precision_refusal
from llmgw.errors import UsageError
from llmgw.inventory import GpuInfo, Inventory
from llmgw.modelplan import bandwidth, memory
from llmgw.modelplan.memory import CPU_ENGINES, Split, gb
from llmgw.modelplan.shapes import CardClass, Shape, card_classes, group_shapes
from llmgw.modelplan.types import Layout, ModelFacts, Plan

__all__ = [
    "CardClass",
    "card_classes",
    "plan_for_inventories",
    "plan_for_shapes",
    "plan_model",
]

# A layout that cannot hold even this much context beside the weights is not
# offered: below it a chat model is of little use. A shorter context asked for
# is planned as asked.
MIN_CONTEXT_TOKENS = 2048

# The trained context of a model whose metadata does not say: llama.cpp's and
# vLLM's own fallback is of this order, and it keeps the plan modest.
UNKNOWN_TRAINED_CONTEXT = 4096

# Tensor-parallel widths vLLM and SGLang are run at; beyond one node's cards
# they only matter for saying what a model would need.
TENSOR_WIDTHS = (2, 4, 8, 16, 32, 64)
TORCH_ENGINES = ("vllm", "sglang")

# The oldest cards a precision runs on. fp8: the bound the reference's agent
# keeps for --quantization fp8 (Ada and Hopper, 8.9 and newer); older cards
# would need another kernel (Marlin) whose speed and memory are not planned.
MIN_COMPUTE_CAPABILITY = {"fp8": (8, 9)}

# A layout planned for a fleet names this many of its nodes and counts the
# rest in a note: 10,000 names on each layout of each model's plan is
# memory kept for nothing (placement reads the cards, not the names).
HOSTS_NAMED = 16


def plan_model(
    facts: ModelFacts,
    *,
    engine: str,
    context: int = 0,
    slots: int = 1,
    cards: Sequence[GpuInfo] | None = None,
    host_memory_bytes: int = 0,
    cpu_bandwidth_gbs: float = 0.0,
    precision: str = "",
) -> Plan:
    """Every layout that runs the model on these cards (one node's) or its CPU, best first.

    context 0 plans the model's trained context, capped to what fits on the
    fewest cards; a context asked for is kept whole on the fewest cards that
    hold it, and shrunk only where none does. ``precision`` ("bf16", "fp8")
    plans the weights as vLLM or SGLang load them at it; other engines refuse
    it, and fp8 takes cards of compute capability 8.9 or newer.
    """
    shape = Shape(tuple(card_classes(cards or [])), host_memory_bytes, cpu_bandwidth_gbs)
    return plan_for_shapes(facts, engine, context, slots, {shape: []}, precision=precision)


def _at_precision(facts: ModelFacts, engine: str, precision: str) -> tuple[ModelFacts, str]:
    """The facts at ``precision``, and the note that says so ("" for none)."""
    if not precision:
        return facts, ""
    if engine not in memory.QUANTIZING_ENGINES:
        raise UsageError(precision_refusal(engine, precision))
    if precision not in memory.PRECISION_BYTES:
        raise UsageError(
            f"precision {precision!r} is not known", hint="one of: bf16, fp8 (or none)"
        )
    converted = memory.at_precision(facts, precision)
    if converted.weights_bytes == facts.weights_bytes:
        return converted, (
            f"weights planned as stored ({gb(facts.weights_bytes)}): "
            f"{precision} would not make them smaller"
        )
    return converted, (
        f"weights planned at {precision}, as {engine} loads them: "
        f"{gb(converted.weights_bytes)} instead of {gb(facts.weights_bytes)}"
    )


def plan_for_inventories(
    facts: ModelFacts,
    engine: str,
    context: int = 0,
    slots: int = 1,
    inventories: Iterable[Inventory] = (),
    *,
    cpu_bandwidth_gbs_by_host: Mapping[str, float] | None = None,
    precision: str = "",
) -> Plan:
    """The layouts of every distinct node shape among inventories, best first.

    Alike nodes (shapes.py: same cards, host memory to a GiB, bandwidth to
    ~10%) are planned once; each layout names nodes (hosts) it runs on. CPU
    speeds need the agents' measured memory bandwidth: by hostname in
    cpu_bandwidth_gbs_by_host, else the host's own mem_bandwidth_gbs.
    """
    shapes = group_shapes(inventories, cpu_bandwidth_gbs_by_host)
    return plan_for_shapes(facts, engine, context, slots, shapes, precision=precision)


def plan_for_shapes(
    facts: ModelFacts,
    engine: str,
    context: int,
    slots: int,
    shapes: Mapping[Shape, Sequence[str]],
    *,
    precision: str = "",
) -> Plan:
    """The layouts of each shape of node (with the hostnames of each), merged, best first.

    The work follows the shapes, not the nodes: GPU layouts are worked out
    once per set of card kinds, a CPU layout once per host memory and
    bandwidth, and a layout names at most HOSTS_NAMED of its nodes.
    """
    facts, precision_note = _at_precision(facts, engine, precision)
    target, explicit, refused = _target_context(facts, engine, context, slots)
    if refused:
        return Plan(
            facts=facts,
            context=target,
            kv_bytes_per_token=memory.kv_bytes_per_token(facts),
            refused=refused,
        )
    on_cards: dict[tuple[CardClass, ...], tuple[list[Layout], dict[str, str]]] = {}
    on_cpu: dict[tuple[int, float], Layout | None] = {}
    # layout's text (hosts aside) -> [layout, nodes, first hostnames]
    merged: dict[str, list] = {}
    texts: dict[int, str] = {}
    card_refusals: dict[str, str] = {}
    for shape, hosts in shapes.items():
        got = on_cards.get(shape.classes)
        if got is None:
            usable, too_old = _cards_for_precision(shape.classes, precision)
            layouts = [
                la
                for card_class in usable
                for la in _gpu_layouts(facts, engine, target, slots, card_class)
            ]
            got = on_cards[shape.classes] = (layouts, too_old)
        layouts, too_old = got
        card_refusals.update(too_old)
        if engine in CPU_ENGINES and shape.host_memory_bytes > 0:
            host = (shape.host_memory_bytes, shape.bandwidth_gbs)
            if host not in on_cpu:
                on_cpu[host] = _cpu_layout(facts, target, slots, *host)
            if on_cpu[host] is not None:
                layouts = [*layouts, on_cpu[host]]
        for layout in layouts:
            text = texts.get(id(layout))
            if text is None:
                text = texts[id(layout)] = layout.model_dump_json(exclude={"hosts"})
            entry = merged.get(text)
            if entry is None:
                entry = merged[text] = [layout, 0, []]
            entry[1] += len(hosts)
            if len(entry[2]) < HOSTS_NAMED:
                entry[2] += hosts[: HOSTS_NAMED - len(entry[2])]
    plan = _finish(facts, target, explicit, [_named(*entry) for entry in merged.values()])
    if precision_note:
        plan.notes.insert(0, precision_note)
    # Said once in the plan, and to placement for the nodes of those cards.
    plan.notes += [why for why in dict.fromkeys(card_refusals.values())]
    plan.card_refusals = card_refusals
    if not plan.layouts:
        plan.refused = _shapes_refusal(facts, engine, target, slots, shapes, precision)
    return plan


def _named(layout: Layout, nodes: int, hosts: list[str]) -> Layout:
    """The layout naming (some of) the nodes it was planned on."""
    notes = layout.notes
    if nodes > len(hosts):
        notes = [*notes, f"planned for {nodes} nodes alike; hosts names {len(hosts)} of them"]
    return layout.model_copy(update={"hosts": hosts, "notes": notes})


def _cards_for_precision(
    classes: Sequence[CardClass], precision: str
) -> tuple[list[CardClass], dict[str, str]]:
    """The kinds of card that run weights at ``precision``, and why each other one does not."""
    if precision not in MIN_COMPUTE_CAPABILITY:
        return list(classes), {}
    least = MIN_COMPUTE_CAPABILITY[precision]
    usable: list[CardClass] = []
    refused: dict[str, str] = {}
    for c in classes:
        cc = _cc(c.compute_capability)
        if cc is None or cc >= least:
            usable.append(c)  # a card that does not say is let try
        else:
            refused[c.name] = (
                f"{precision} weights need compute capability {least[0]}.{least[1]} or newer; "
                f"{c.name} is {c.compute_capability}"
            )
    return usable, refused


def _cc(text: str) -> tuple[int, int] | None:
    major, _, minor = (text or "").partition(".")
    if not major.isdigit() or not (minor or "0").isdigit():
        return None
    return int(major), int(minor or 0)


def _shapes_refusal(
    facts: ModelFacts,
    engine: str,
    target: int,
    slots: int,
    shapes: Mapping[Shape, Sequence[str]],
    precision: str,
) -> str:
    """Why no shape runs the model, in the words of the one with the most memory."""
    if not shapes:
        return "there are no nodes to plan on"
    most = max(s.capacity_bytes for s in shapes)
    refusals = []
    for shape in shapes:
        if shape.capacity_bytes != most:
            continue
        usable, too_old = _cards_for_precision(shape.classes, precision)
        if too_old and not usable:
            refusals.append("; ".join(dict.fromkeys(too_old.values())))
            continue
        refusals.append(
            _refusal(facts, engine, target, slots, usable, shape.host_memory_bytes)
            + "".join(f"; {why}" for why in dict.fromkeys(too_old.values()))
        )
    return max(refusals)


def _target_context(
    facts: ModelFacts, engine: str, context: int, slots: int
) -> tuple[int, bool, str]:
    """(context to plan, whether it was asked for, refusal)."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}", hint="one of " + ", ".join(ENGINES))
    if context < 0:
        raise UsageError(f"context {context} is negative", hint="0 plans the trained context")
    if slots < 1:
        raise UsageError(f"slots {slots}: at least one is needed")
    trained = facts.trained_context
    if context and trained and context > trained:
        return context, True, f"context {context} is past the model's trained {trained}"
    if facts.weights_bytes <= 0:
        return context or trained, bool(context), "the size of the model's weights is not known"
    if context:
        return context, True, ""
    return trained or UNKNOWN_TRAINED_CONTEXT, False, ""


def _min_context(target: int) -> int:
    return min(target, MIN_CONTEXT_TOKENS)


def _candidates(facts: ModelFacts, engine: str, count: int) -> list[tuple[int, Split]]:
    """Card counts to try on `count` cards of one kind, with how the model is split."""
    result: list[tuple[int, Split]] = [(1, "tensor")]
    if engine in TORCH_ENGINES:
        result += [
            (tp, "tensor")
            for tp in TENSOR_WIDTHS
            if tp <= count and memory.tensor_width_allowed(facts, tp)
        ]
    else:
        most = min(count, facts.layers) if facts.layers else count
        result += [(n, "layer") for n in range(2, most + 1)]
    return result


def _gpu_layouts(
    facts: ModelFacts, engine: str, target: int, slots: int, cards: CardClass
) -> list[Layout]:
    layouts: list[Layout] = []
    for n, split in _candidates(facts, engine, cards.count):
        ctx = memory.context_that_fits(
            facts,
            engine=engine,
            usable_bytes=cards.usable_bytes,
            target_context=target,
            slots=slots,
            cards=n,
            split=split,
        )
        if ctx < _min_context(target):
            continue
        layouts.append(_gpu_layout(facts, engine, target, ctx, slots, cards, n, split))
    # More cards of a layer split hold more context but are no faster: offer
    # the fewest that run the model when one card cannot, and the fewest that
    # hold the whole context when fewer cards do not.
    singles = [la for la in layouts if la.gpus == 1]
    splits = [la for la in layouts if la.gpus > 1 and la.tensor_parallel == 1]
    if not splits:
        return layouts
    keep = [] if singles else [splits[0]]
    if not any(la.context >= target for la in singles + keep):
        keep += [la for la in splits if la.context >= target][:1]
    return [la for la in layouts if la.gpus == 1 or la.tensor_parallel > 1 or la in keep]


def _gpu_layout(
    facts: ModelFacts,
    engine: str,
    target: int,
    ctx: int,
    slots: int,
    cards: CardClass,
    n: int,
    split: Split,
) -> Layout:
    need = memory.card_need(facts, engine=engine, context=ctx, slots=slots, cards=n, split=split)
    gbs = bandwidth.lookup_card_bandwidth_gbs(cards.name)
    notes: list[str] = []
    if gbs is None:
        gbs = bandwidth.DEFAULT_CARD_BANDWIDTH_GBS
        notes.append(
            f"{cards.name} is not in the bandwidth table: its speed is estimated at {gbs:.0f} GB/s"
        )
    read = bandwidth.bytes_read_per_token(facts)
    where = f"one {cards.name}" if n == 1 else f"{n} × {cards.name}"
    tp = n if split == "tensor" else 1
    nvlink = n > 1 and n <= cards.nvlink_group
    expert_parallel = split == "tensor" and n > 1 and facts.experts > 1
    if split == "layer":
        speed = bandwidth.layer_split_tokens_per_s(read, gbs, n)
        notes.append(
            f"llama.cpp splits the layers over {n} cards; they take turns, "
            "so a reply is no faster than on one"
        )
    else:
        speed = bandwidth.gpu_tokens_per_s(
            read, gbs, tensor_parallel=tp, layers=facts.layers, nvlink=nvlink
        )
        if n > 1:
            notes.append(
                f"tensor parallel {n} over NVLink"
                if nvlink
                else f"tensor parallel {n} without NVLink between the cards: "
                "every layer's all-reduces cross PCIe"
            )
        if n > facts.kv_heads > 0:
            notes.append(f"each card holds a copy of one of the model's {facts.kv_heads} KV heads")
    if expert_parallel:
        notes.append("a model of experts: each card holds whole experts (--enable-expert-parallel)")
    if ctx < target:
        notes.append(_shrunk_note(target, ctx, where))
    return Layout(
        kind="gpu",
        card_name=cards.name,
        card_usable_bytes=cards.usable_bytes,
        gpus=n,
        tensor_parallel=tp,
        expert_parallel=expert_parallel,
        per_card=need,
        context=ctx,
        tokens_per_s=round(speed, 1),
        notes=notes,
    )


def _cpu_layout(
    facts: ModelFacts, target: int, slots: int, host_memory_bytes: int, bandwidth_gbs: float
) -> Layout | None:
    usable = memory.usable_host_bytes(host_memory_bytes)
    ctx = memory.cpu_context_that_fits(
        facts, usable_bytes=usable, target_context=target, slots=slots
    )
    if ctx < _min_context(target):
        return None
    notes = []
    speed = bandwidth.cpu_tokens_per_s(bandwidth.bytes_read_per_token(facts), bandwidth_gbs)
    if bandwidth_gbs <= 0:
        notes.append("the node's memory bandwidth is not measured yet: no speed estimate")
    if ctx < target:
        notes.append(_shrunk_note(target, ctx, f"the CPU's {gb(usable)} usable"))
    return Layout(
        kind="cpu",
        host_memory_bytes=memory.cpu_need_bytes(facts, context=ctx, slots=slots),
        context=ctx,
        tokens_per_s=round(speed, 1),
        notes=notes,
    )


def _shrunk_note(target: int, ctx: int, where: str) -> str:
    return f"context shrunk from {target} to {ctx} tokens: what fits beside the weights on {where}"


def _rank(layouts: list[Layout], target: int, explicit: bool) -> list[Layout]:
    """Best first: cards before the CPU; a context asked for kept whole before shrunk;
    fewest cards; fastest."""

    def key(layout: Layout) -> tuple:
        shrunk = explicit and layout.context < target
        return (layout.kind == "cpu", shrunk, layout.gpus, -layout.tokens_per_s, -layout.context)

    return sorted(layouts, key=key)


def _finish(facts: ModelFacts, target: int, explicit: bool, layouts: list[Layout]) -> Plan:
    ranked = _rank(layouts, target, explicit)
    kv_per_token = memory.kv_bytes_per_token(facts)
    notes: list[str] = []
    if kv_per_token:
        notes.append(f"the context costs {gb(kv_per_token * 1000)} per 1000 tokens a slot")
    else:
        notes.append("the model's KV shape is not known: the context's memory is not counted")
    if not explicit:
        source = "the model's trained context" if facts.trained_context else "a default"
        notes.append(f"context {target}: {source}")
    if ranked and ranked[0].context < target:
        whole = next((la for la in ranked if la.context >= target), None)
        if whole is not None:
            notes.append(f"{_describe(whole)} the whole {target}")
        elif explicit:
            notes.append(
                f"no layout here holds a context of {target}; the best holds {ranked[0].context}"
            )
    return Plan(
        facts=facts,
        context=ranked[0].context if ranked else target,
        kv_bytes_per_token=kv_per_token,
        layouts=ranked,
        notes=notes,
    )


def _describe(layout: Layout) -> str:
    """Who holds it, with the verb: "one NVIDIA L4 holds", "2 × NVIDIA L4 hold"."""
    if layout.kind == "cpu":
        return "the CPU holds"
    if layout.gpus > 1:
        return f"{layout.gpus} × {layout.card_name} hold"
    return f"one {layout.card_name} holds"


def _max_weights_bytes(
    facts: ModelFacts, engine: str, usable: int, n: int, split: Split, context: int, slots: int
) -> int:
    """The most weights n cards hold beside `context` tokens (binary search on the size)."""

    def fits(weights: int) -> bool:
        trial = facts.model_copy(update={"weights_bytes": weights})
        need = memory.card_need(
            trial, engine=engine, context=context, slots=slots, cards=n, split=split
        )
        return need.total_bytes <= usable

    low, high = 0, usable * n
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _refusal(
    facts: ModelFacts,
    engine: str,
    target: int,
    slots: int,
    classes: Sequence[CardClass],
    host_memory_bytes: int,
) -> str:
    min_ctx = _min_context(target)
    what = f"the weights ({gb(facts.weights_bytes)}) with a {min_ctx}-token context"
    if not classes:
        if engine not in CPU_ENGINES:
            return f"{engine} needs GPUs and there are none here; llama.cpp runs a GGUF on the CPU"
        if host_memory_bytes <= 0:
            return "there are no GPUs here and the host's memory is not known"
        usable = memory.usable_host_bytes(host_memory_bytes)
        room = usable - memory.cpu_need_bytes(facts, context=min_ctx, slots=slots)
        most = facts.weights_bytes + room
        return (
            f"{what} do not fit in the CPU's {gb(usable)} usable: it holds at most "
            f"{gb(max(most, 0))} of weights; a smaller quantisation or a node with more memory"
        )
    # What the biggest layout of each kind holds, and how many of the largest
    # card the model would need.
    best_weights, best_where = 0, ""
    for cards in classes:
        for n, split in _candidates(facts, engine, cards.count):
            held = _max_weights_bytes(facts, engine, cards.usable_bytes, n, split, min_ctx, slots)
            if held > best_weights:
                best_weights = held
                best_where = f"{n} × {cards.name}" if n > 1 else f"one {cards.name}"
    parts = [f"{what} fit nowhere here"]
    if best_weights:
        parts[0] += f": the most these cards hold is {gb(best_weights)} ({best_where})"
    largest = max(classes, key=lambda c: c.memory_total_bytes)
    needed = _cards_needed(facts, engine, largest, min_ctx, slots)
    parts.append(
        f"it needs {needed} × {largest.name}, or a smaller quantisation"
        if needed
        else f"it needs more than 64 × {largest.name}; a smaller quantisation"
    )
    if engine in TORCH_ENGINES and any(
        tp <= largest.count and not memory.tensor_width_allowed(facts, tp) for tp in TENSOR_WIDTHS
    ):
        parts.append(
            f"tensor parallel must divide the model's {facts.kv_heads} KV heads "
            "or be a multiple of them"
        )
    if engine in CPU_ENGINES and host_memory_bytes > 0:
        usable = memory.usable_host_bytes(host_memory_bytes)
        parts.append(f"nor does the CPU's {gb(usable)} usable hold it")
    return "; ".join(parts)


def _cards_needed(
    facts: ModelFacts, engine: str, cards: CardClass, context: int, slots: int
) -> int:
    """The fewest cards of this kind that would hold the model (0: more than 64)."""
    widths = (
        [tp for tp in TENSOR_WIDTHS if memory.tensor_width_allowed(facts, tp)]
        if engine in TORCH_ENGINES
        else list(range(2, 65))
    )
    split: Split = "tensor" if engine in TORCH_ENGINES else "layer"
    for n in widths:
        need = memory.card_need(
            facts, engine=engine, context=context, slots=slots, cards=n, split=split
        )
        if need.total_bytes <= cards.usable_bytes:
            return n
    return 0
