"""Scoring: which of the nodes a request fits on gets it.

Every node that fits gets a score key, a tuple compared left to right, lower
wins. The components, most important first:

1. GPUs before CPU: a CPU layout is the fallback when no GPU layout fits.
2. A CPU layout keeps off nodes with GPUs, whose cores and memory feed them.
3. Fewest cards: a model that fits one card should not hold two.
4. The most context: a node that only holds a shrunk context serves worse.
5. For tensor parallelism, cards joined by NVLink.
6. Pack before spread, coarse: do not open an empty node while a used one
   fits; whole nodes stay free for the models that need all their cards.
7. Weights already on the node: no download before the replica can start.
8. Pack before spread, fine: the node already most used (share of its memory).
9. The plan's order of layouts: across kinds of card, the faster first.
10. The tightest fit: the fewest bytes left free on the chosen cards.
11. Node id, so that equal nodes give the same answer in any order.

Cached weights come after the coarse packing rule on purpose: starting from
the disk saves minutes once, an opened node stays fragmented for as long as
the replica lives. The plan's order comes after packing for the same
reason: ranked by speed alone, every small model would open the fastest
node while slower cards already in use sit with room to spare.
"""

from __future__ import annotations

from pydantic import BaseModel

from llmgw.placement.candidates import NodeCandidate, PlacementRequest, gib
from llmgw.placement.fit import Fit

# Positions in the score key, named for the words below.
(
    ON_CPU,
    CPU_ON_GPU_NODE,
    CARDS,
    CONTEXT,
    UNLINKED,
    OPENS_EMPTY,
    NOT_CACHED,
    PACK,
    LAYOUT,
    LEFTOVER,
    NODE,
) = range(11)

ScoreKey = tuple


class Score(BaseModel):
    """The chosen node's score, component by component (see the module's docstring)."""

    gpu: bool
    cards: int
    context: int
    nvlinked: bool
    opens_empty_node: bool
    weights_cached: bool
    # Share of the node's memory (GPU memory, or host memory for a CPU layout)
    # already in use before this placement, 0..1.
    used_fraction: float
    layout_index: int
    leftover_bytes: int


def score_key(request: PlacementRequest, node: NodeCandidate, fit: Fit) -> ScoreKey:
    """The key a fitting node is ranked by; lower is better."""
    need = fit.need
    static = node.static()
    used = node.gpu_used_bytes
    gpu_used = sum(used.values()) if used else 0
    if need.gpu:
        total = static.gpu_total_bytes
        fraction = min(1.0, gpu_used / total) if total else 0.0
        empty = gpu_used == 0
        cpu_on_gpu_node = 0
    else:
        total = static.host_total_bytes
        host_used = node.host_memory_used_bytes
        fraction = min(1.0, host_used / total) if total else 0.0
        empty = host_used == 0 and gpu_used == 0
        cpu_on_gpu_node = 1 if static.cards else 0
    return (
        0 if need.gpu else 1,
        cpu_on_gpu_node,
        need.cards,
        -need.layout.context,
        0 if fit.linked else 1,
        1 if empty else 0,
        0 if request.model in node.models_cached else 1,
        -fraction,
        need.index,
        fit.leftover_bytes,
        node.node_id,
    )


def score_of(key: ScoreKey) -> Score:
    return Score(
        gpu=key[ON_CPU] == 0,
        cards=key[CARDS],
        context=-key[CONTEXT],
        layout_index=key[LAYOUT],
        nvlinked=key[UNLINKED] == 0,
        opens_empty_node=key[OPENS_EMPTY] == 1,
        weights_cached=key[NOT_CACHED] == 0,
        used_fraction=-key[PACK],
        leftover_bytes=key[LEFTOVER],
    )


def why_lower(key: ScoreKey, winner: ScoreKey, fit: Fit) -> str:
    """Why a node that fits lost to the winner: the first component it lost on."""
    name = winner[NODE]
    for pos, (mine, theirs) in enumerate(zip(key, winner, strict=True)):
        if mine != theirs:
            return f"fits {_where(fit)} but scored lower ({_phrase(pos, mine, theirs, name)})"
    return f"fits {_where(fit)} but scored lower (the same score as {name})"


def _where(fit: Fit) -> str:
    if not fit.need.gpu:
        return "on CPU"
    if len(fit.gpu_indexes) == 1:
        return f"on GPU {fit.gpu_indexes[0]}"
    return f"on GPUs {list(fit.gpu_indexes)}"


def _phrase(pos: int, mine, theirs, name: str) -> str:
    if pos == ON_CPU:
        return f"only a CPU layout fits here; {name} runs it on GPUs"
    if pos == CPU_ON_GPU_NODE:
        return f"a CPU layout is kept off nodes with GPUs; {name} has none"
    if pos == CARDS:
        return f"needs {mine} cards here, {theirs} on {name}: fewest cards first"
    if pos == CONTEXT:
        return f"holds a context of {-mine} here, {-theirs} on {name}"
    if pos == LAYOUT:
        return (
            f"takes layout {mine + 1} of the plan, {name} layout {theirs + 1}, "
            "which the plan ranks higher"
        )
    if pos == UNLINKED:
        return f"its cards are not joined by NVLink; those on {name} are"
    if pos == OPENS_EMPTY:
        return f"it is empty and {name} is not: pack before spread keeps whole nodes free"
    if pos == NOT_CACHED:
        return f"the weights are not on its disk; {name} has them"
    if pos == PACK:
        return f"{-mine:.1%} used against {-theirs:.1%} on {name}: pack before spread"
    if pos == LEFTOVER:
        return f"leaves {gib(mine)} free once placed, {name} {gib(theirs)}: the tighter fit wins"
    return f"a tie with {name}, which sorts first by node id"
