"""The filter chain: each filter keeps a node (None) or says in plain words why not.

Filters run in the order of ``CHAIN``, cheapest and most decisive first, and
the first that refuses a node gives its reason: a node that is not ready is
reported as not ready, not also as short of memory. Every reason is a
sentence an operator can act on, with the figures in it ("GPU 3 has 12.0 GiB
free, needs 41.5 GiB"), and where the node has its own words for a problem
("failed: libstdc++.so.6 is too old") those are passed on unchanged.

Each filter also belongs to a ``category``, the short phrase a refusal
counts nodes under ("2 not ready, 1 cordoned").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from llmgw.placement.candidates import (
    ROLE_LABEL,
    NodeCandidate,
    NodeStatic,
    PlacementRequest,
    gib,
)
from llmgw.placement.fit import Misfit, fit_node

Filter = Callable[[PlacementRequest, NodeCandidate], "str | None"]


def node_ready(request: PlacementRequest, node: NodeCandidate) -> str | None:
    """Only a ready node takes new replicas."""
    if node.state == "ready":
        return None
    return f"node is {node.state.replace('_', ' ')}"


def not_cordoned(request: PlacementRequest, node: NodeCandidate) -> str | None:
    return "cordoned: takes no new replicas" if node.cordoned else None


def not_draining(request: PlacementRequest, node: NodeCandidate) -> str | None:
    return "draining: its replicas are moving off" if node.draining else None


def labels_match(request: PlacementRequest, node: NodeCandidate) -> str | None:
    """The model's labels must all be on the node; a node with a role takes only that role."""
    node_labels = node.labels
    missing = [f"{k}={v}" for k, v in request.labels.items() if node_labels.get(k) != v]
    if missing:
        has = ", ".join(f"{k}={v}" for k, v in sorted(node_labels.items())) or "none"
        return f"labels do not match: needs {', '.join(missing)}, node has {has}"
    role = node_labels.get(ROLE_LABEL)
    if role and request.labels.get(ROLE_LABEL) != role:
        return f"kept for role {role}: the model does not ask for it"
    return None


def engine_runs(request: PlacementRequest, node: NodeCandidate) -> str | None:
    """The engine is installed and not failed, or the node can install it.

    An engine still installing keeps the node: the replica waits in its own
    installing state, with its deadline, rather than going elsewhere.
    """
    engine = request.engine
    state = node.engines_installed.get(engine)
    if state is not None:
        if state.startswith("failed"):
            return f"{engine} {state}"
        return None
    if engine in node.installable_engines:
        return None
    can = ", ".join(node.installable_engines) or "none"
    return f"cannot install {engine} here (it can install: {can})"


def gpu_suitable(request: PlacementRequest, node: NodeCandidate) -> str | None:
    """A plan of GPU layouts only needs a card of the profile's compute capability and size."""
    prep = request.prepared()
    if not prep.needs_gpu:
        return None
    static = node.static()
    names = static.eligible_names(prep.min_cc, prep.min_total_bytes)
    # On a node with MIG the reason also says why its cards look small.
    mig = f"; {static.mig_note}" if static.mig_note else ""
    if names:
        if not prep.card_names or not names.isdisjoint(prep.card_names):
            return None
        # The plan's own words for these cards ("fp8 weights need compute
        # capability 8.9 or newer; …") say more than that it skipped them.
        refusals = request.plan.card_refusals
        said = [refusals[n] for n in sorted(names) if n in refusals]
        if said:
            return "; ".join(said) + mig
        return (
            f"the plan has no layout for its cards ({_cards(static)}); "
            f"its layouts are for {', '.join(prep.card_names)}{mig}"
        )
    if not static.cards:
        if static.mig_note:
            return f"has no GPU to place on: {static.mig_note}"
        note = node.inventory.host.gpu_note
        return f"has no GPU ({note})" if note else "has no GPU"
    wants = []
    if prep.min_cc_text:
        wants.append(f"of compute capability {prep.min_cc_text} or newer")
    if prep.min_total_bytes:
        wants.append(f"with {gib(prep.min_total_bytes)} or more")
    return f"no GPU {' '.join(wants)}: has {_cards(static)}{mig}"


def _cards(static: NodeStatic) -> str:
    """'2 × NVIDIA A100-SXM4-40GB (cc 8.0, 40.0 GiB)', kind by kind (worked out once a node)."""
    if static.cards_text is None:
        groups = Counter((c[3], c[4] or "unknown", c[1]) for c in static.cards)
        static.cards_text = ", ".join(
            f"{n} × {name} (cc {cc}, {gib(total)})" for (name, cc, total), n in groups.items()
        )
    return static.cards_text


def memory_fits(request: PlacementRequest, node: NodeCandidate) -> str | None:
    """Some layout of the plan fits the node's free memory (see fit.py)."""
    fit = fit_node(request, node)
    return fit.reason if isinstance(fit, Misfit) else None


# The order the chain runs in. memory_fits is last and is applied by
# decide.py through fit_node directly, which also says which cards fit.
CHAIN: tuple[Filter, ...] = (
    node_ready,
    not_cordoned,
    not_draining,
    labels_match,
    engine_runs,
    gpu_suitable,
)
FILTERS: tuple[Filter, ...] = (*CHAIN, memory_fits)

_CATEGORIES: dict[Filter, str] = {
    not_cordoned: "cordoned",
    not_draining: "draining",
    labels_match: "with other labels",
    gpu_suitable: "without a suitable GPU",
}


def category(f: Filter, request: PlacementRequest, node: NodeCandidate) -> str:
    """The phrase a refusal counts this filter's nodes under."""
    if f is node_ready:
        return node.state.replace("_", " ")
    if f is engine_runs:
        return f"cannot run {request.engine}"
    return _CATEGORIES.get(f, f.__name__)


def first_refusal(request: PlacementRequest, node: NodeCandidate) -> tuple[Filter, str] | None:
    """The first filter of the chain (memory excluded) that refuses the node, and its reason."""
    for f in CHAIN:
        reason = f(request, node)
        if reason is not None:
            return f, reason
    return None
