"""Layout fit: on one node, the first layout of the plan that fits, and on which cards.

The plan lists its layouts best first; a node takes the first it can hold.
For a GPU layout that means ``cards`` cards of the needed kind (the profile's
compute capability and size, and the card the layout was planned for when it
names one), each with at least the layout's per-card bytes free. Among the cards that qualify the
fullest go first (best fit: the emptiest cards stay whole for larger models),
ties by index; for tensor parallelism, cards joined by NVLink are preferred
when the node has such a set, since every layer's all-reduce crosses them.
A CPU layout needs the host's free memory, and the cores the request
reserves (on a node that says how many it has).

When nothing fits, the answer says, layout by layout, how much is free and
how much is needed, so an operator reads the shortfall without arithmetic.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import combinations, islice
from typing import NamedTuple

from llmgw.placement.candidates import (
    LayoutNeed,
    NodeCandidate,
    NodeStatic,
    PlacementRequest,
    Prepared,
    free_of,
    gib,
)

# A node with a partial NVLink topology (bridged pairs, say) is searched for a
# joined set of cards; with 16 cards and 8 to choose there are 12,870 sets, so
# the search stops here and takes unjoined cards instead. No real topology
# needs more than a handful of tries before the first joined set.
LINKED_SEARCH_CAP = 2000

SHORT_GPU = "short of GPU memory"
SHORT_HOST = "short of host memory"
SHORT_CORES = "short of CPU cores"
TOO_FEW_GPUS = "with too few GPUs"


class Fit(NamedTuple):
    """A layout that fits a node, and where."""

    need: LayoutNeed
    # Sorted ascending; empty for a CPU layout.
    gpu_indexes: tuple[int, ...]
    # Every pair of the chosen cards is joined by NVLink, or the layout does
    # not need them joined (one card, a layer split, a CPU layout).
    linked: bool
    # Bytes left free on the chosen cards once placed (host memory for CPU).
    leftover_bytes: int


class Misfit(NamedTuple):
    """Why no layout of the plan fits a node."""

    reason: str
    category: str
    # The most free bytes on one suitable card (GPU) or on the host (CPU).
    largest_free_bytes: int
    # The most suitable cards the node has (for "too few GPUs").
    suitable_cards: int
    # The node's cores not reserved (for "short of CPU cores").
    free_cores: int = 0


def fit_node(request: PlacementRequest, node: NodeCandidate) -> Fit | Misfit:
    """The first layout of the request's plan that fits the node, or why none does."""
    return fit_prepared(request.prepared(), node)


def fit_prepared(prep: Prepared, node: NodeCandidate) -> Fit | Misfit:
    """fit_node for a request already prepared: what place() calls once per node."""
    static = node.static()
    used = node.gpu_used_bytes
    # Per card name (a plan's layouts may be for several kinds of card):
    # the suitable cards, and their (free bytes, index) fullest first, the
    # order cards are tried in.
    # MIG instances are left out of layouts across cards, so the cards
    # depend on the card count too, on nodes with MIG.
    kind: tuple | None = None
    name = ""
    eligible: tuple = ()
    frees: list[tuple[int, int]] = []
    misses: list[tuple[LayoutNeed, str, list, int]] = []
    for need in prep.layouts:
        if not need.gpu:
            host_free = static.host_total_bytes - node.host_memory_used_bytes
            if host_free < need.host_bytes:
                misses.append((need, "host", [], 0))
            elif (
                need.cores and static.cpu_total and static.cpu_total - node.cores_used < need.cores
            ):
                misses.append((need, "cores", [], 0))
            else:
                return Fit(need, (), True, host_free - need.host_bytes)
            continue
        whole = need.cards > 1
        if (need.card_name, whole) != kind:
            kind = (need.card_name, whole)
            name = need.card_name
            eligible, frees, _ = static.cards_for(prep.min_cc, prep.min_total_bytes, name, whole)
            if used and eligible:
                if static.mig:
                    frees = sorted([(free_of(static, i, t, used), i) for i, t in eligible])
                else:
                    frees = sorted([(total - used.get(i, 0), i) for i, total in eligible])
        if not eligible and name:
            continue  # planned for a kind of card this node does not have
        if len(eligible) < need.cards:
            misses.append((need, "count", frees, len(eligible)))
            continue
        want = need.need_bytes
        if need.cards == 1:
            # The common case, without building the list of every card that fits.
            for free, i in frees:
                if free >= want:
                    return Fit(need, (i,), True, free - want)
            misses.append((need, "memory", frees, len(eligible)))
            continue
        room = [f for f in frees if f[0] >= want]
        if len(room) < need.cards:
            misses.append((need, "memory", frees, len(eligible)))
            continue
        chosen, linked = _choose(room, need, static)
        leftover = sum(f for f, _ in chosen) - want * need.cards
        return Fit(need, tuple(sorted(i for _, i in chosen)), linked, leftover)
    return _misfit(node, misses)


def _choose(
    room: list[tuple[int, int]], need: LayoutNeed, static: NodeStatic
) -> tuple[list[tuple[int, int]], bool]:
    k = need.cards
    if need.tp <= 1:
        # A layer split takes turns between the cards: no all-reduce to
        # carry, so nothing gained by joined cards and nothing lost without.
        return room[:k], True
    nvlink = static.nvlink
    if nvlink != "some" or k > static.largest_linked:
        # A full mesh joins any set, no links join none, and no search finds
        # more joined cards than the topology has.
        return room[:k], nvlink == "all"
    links = static.links
    # combinations() walks the preferred (fullest-first) order, so the first
    # joined set found is also the best-fitting one.
    for combo in islice(combinations(room, k), LINKED_SEARCH_CAP):
        idx = [i for _, i in combo]
        if all(b in links[a] for a, b in combinations(idx, 2)):
            return list(combo), True
    return room[:k], False


def _misfit(node: NodeCandidate, misses: list[tuple[LayoutNeed, str, list, int]]) -> Misfit:
    static = node.static()
    if not misses:
        # Every layout was planned for cards this node does not have.
        names = sorted({c[3] for c in static.cards}) or ["no GPU"]
        reason = f"the plan has no layout for its cards ({', '.join(names)})"
        if static.mig_note:
            reason += f"; {static.mig_note}"
        return Misfit(reason, TOO_FEW_GPUS, 0, 0)
    host_free = max(0, static.host_total_bytes - node.host_memory_used_bytes)
    phrases = []
    largest = most_cards = 0
    free_cores = max(0, static.cpu_total - node.cores_used)
    kinds = set()
    for need, why, frees, suitable in misses:
        kinds.add(why)
        if why == "host":
            text = f"host has {gib(host_free)} free, needs {gib(need.host_bytes)}"
        elif why == "cores":
            text = f"host has {free_cores} of {static.cpu_total} CPU cores free, needs {need.cores}"
        elif why == "count":
            most_cards = max(most_cards, suitable)
            kind = "suitable " if suitable < len(static.cards) else ""
            if not suitable:
                text = f"has no {kind}GPU"
            else:
                text = f"needs {need.cards} {kind}GPUs, has {suitable}"
        else:
            largest = max(largest, _nth_most_free(frees, 0)[0])
            if need.cards == 1:
                free, i = _nth_most_free(frees, 0)
                if i in static.mig and node.gpu_used_bytes.get(i):
                    # The most free is an instance with a replica: so is every other.
                    text = (
                        "every card it could use is taken (a MIG instance holds one "
                        f"replica), needs {gib(need.need_bytes)}"
                    )
                else:
                    text = f"GPU {i} has {gib(free)} free, needs {gib(need.need_bytes)}"
            else:
                # The card that fell short: the most free of those without room.
                have = sum(1 for f, _ in frees if f >= need.need_bytes)
                free, i = _nth_most_free(frees, have)
                text = (
                    f"needs {gib(need.need_bytes)} free on each of {need.cards} cards, "
                    f"{have} of {len(frees)} have it "
                    f"(the next most free, GPU {i}, has {gib(free)})"
                )
        phrases.append(text if len(misses) == 1 else f"{need.shape()}: {text}")
    if "memory" in kinds:
        category = SHORT_GPU
    elif "host" in kinds:
        category, largest = SHORT_HOST, host_free
    elif "cores" in kinds:
        category = SHORT_CORES
    else:
        category = TOO_FEW_GPUS
    reason = "; ".join(phrases)
    if static.mig_note and not kinds <= {"host", "cores"}:
        # Why the cards look smaller or fewer than the machine has.
        reason += f"; {static.mig_note}"
    return Misfit(reason, category, largest, most_cards, free_cores)


def _nth_most_free(frees: list[tuple[int, int]], n: int) -> tuple[int, int]:
    """(free, index) of the n-th most free card (from 0), the lowest index among equals.

    ``frees`` is in fit order, ascending; equal frees sit together by index.
    """
    free = frees[len(frees) - 1 - n][0]
    return max(0, free), frees[bisect_left(frees, (free, -1))][1]
