"""Placement: for one replica, the node and cards it goes to, or for every node why not.

``place`` runs each node through the filter chain (filters.py), fits the plan's
layouts on the nodes that pass (fit.py), and ranks the nodes that fit
(scorers.py). The answer always accounts for every node: the chosen one, the
others that fit and what they lost on, and the reason each of the rest was
dropped. When nothing fits, ``refused`` sums the reasons up in one line.

Pure and synchronous: the reconciler calls it once per replica to place, the
admin service once for ``explain-placement``. A pass that places several
replicas reserves each placement on its node (``NodeCandidate.reserve``)
before the next decision, so two replicas are never given the same free card.

Given a list, ``place`` weighs every node (``scan``). Given a ``NodeIndex``
(index.py), it finds the same choice without weighing every node
(search.py), and the decision works out ``reasons``, ``counts`` and
``fitting`` the first time one of them is read, as the nodes were when it
was made: the answer is the scan's, the work only done for who reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

from pydantic import BaseModel, PrivateAttr

from llmgw.modelplan.types import Layout
from llmgw.placement.candidates import LayoutNeed, NodeCandidate, PlacementRequest, gib
from llmgw.placement.filters import CHAIN, category
from llmgw.placement.fit import (
    SHORT_CORES,
    SHORT_GPU,
    SHORT_HOST,
    TOO_FEW_GPUS,
    Misfit,
    fit_prepared,
)
from llmgw.placement.index import NodeIndex
from llmgw.placement.scorers import Score, score_key, score_of, why_lower

# Refusal counts read in the order the chain drops nodes; the memory
# categories come last since they are reached last.
_MEMORY_RANK = {TOO_FEW_GPUS: 0, SHORT_GPU: 1, SHORT_HOST: 2, SHORT_CORES: 3}
_RANK = {f: rank for rank, f in enumerate(CHAIN)}


class Placement(BaseModel):
    """Where a replica goes."""

    node_id: str
    layout: Layout
    # Position of the layout in the plan (0: the plan's first choice).
    layout_index: int
    gpu_indexes: list[int]
    per_gpu_bytes: dict[int, int]
    host_memory_bytes: int
    score: Score
    # CPU cores it reserves on the node (a CPU layout of a profile with cores).
    cores: int = 0


class Decision(BaseModel):
    """A placement, or none; and for every node not chosen, why.

    A decision made on a NodeIndex leaves reasons, counts and fitting (all
    three, or those its refusal did not need) to be worked out when first
    read: attribute access, dumps, copies, equality and repr all fill them
    in first, so it reads as any other. (Pydantic's serializer reads fields
    directly: a decision is not to be nested in another model unsettled;
    ``settle()`` first.)
    """

    model: str
    profile: str = "default"
    engine: str = ""
    placement: Placement | None = None
    # node id -> why it was not chosen, in node id order.
    reasons: dict[str, str]
    # One line summing up the reasons when nothing fits; "" when placed.
    refused: str = ""
    # Category ("not ready", "short of GPU memory", …) -> nodes that did not fit.
    counts: dict[str, int]
    # How many nodes could have taken it (the chosen one included).
    fitting: int = 0

    # For a decision made on an index: gives (reasons, counts, fitting) when
    # first read; None once they are filled in (and for a scan's decision).
    _later: Callable[[], tuple[dict, dict, int]] | None = PrivateAttr(default=None)

    @classmethod
    def later(cls, later: Callable[[], tuple[dict, dict, int]], **fields: Any) -> Decision:
        """A decision whose fields not given (of reasons, counts, fitting) come from ``later``."""
        d = cls.model_construct(**fields)
        for name in _LATER:
            if name not in fields:
                d.__dict__.pop(name, None)
                d.__pydantic_fields_set__.discard(name)
        d.__pydantic_private__["_later"] = later
        return d

    def settle(self) -> Decision:
        """Fill in what was left for later; every way of reading the decision does so first."""
        private = self.__pydantic_private__
        later = private.get("_later") if private else None
        if later is not None:
            private["_later"] = None
            values = dict(zip(_LATER, later(), strict=True))
            fields = self.__dict__
            values.update(fields)
            # In the order of the fields, as an eager decision has them.
            ordered = {name: values[name] for name in type(self).model_fields}
            fields.clear()
            fields.update(ordered)
            self.__pydantic_fields_set__.update(_LATER)
        return self

    def __getattr__(self, name: str) -> Any:
        # Only reached for a field not yet filled in (or a private attribute).
        if name in _LATER:
            private = object.__getattribute__(self, "__pydantic_private__")
            if private and private.get("_later") is not None:
                return self.settle().__dict__[name]
        return super().__getattr__(name)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return super(Decision, self.settle()).model_dump(**kwargs)

    def model_dump_json(self, **kwargs: Any) -> str:
        return super(Decision, self.settle()).model_dump_json(**kwargs)

    def model_copy(self, **kwargs: Any) -> Decision:
        return super(Decision, self.settle()).model_copy(**kwargs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Decision):
            other.settle()
        return super(Decision, self.settle()).__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr_args__(self):
        return super(Decision, self.settle()).__repr_args__()

    def __iter__(self):
        return super(Decision, self.settle()).__iter__()

    def __getstate__(self) -> dict[Any, Any]:
        return super(Decision, self.settle()).__getstate__()

    def __copy__(self) -> Decision:
        return super(Decision, self.settle()).__copy__()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Decision:
        return super(Decision, self.settle()).__deepcopy__(memo)

    def explain(self) -> str:
        """The decision and every node's reason, as ``explain-placement`` prints it."""
        head = f"{self.model} (profile {self.profile}, {self.engine})"
        p = self.placement
        if p is None:
            lines = [f"{head}: not placed: {self.refused}"]
        else:
            need = LayoutNeed(p.layout_index, p.layout)
            where = f"GPUs {p.gpu_indexes}" if p.gpu_indexes else "CPU"
            lines = [
                (
                    f"{head}: on {p.node_id}, {where}, layout {p.layout_index + 1} "
                    f"({need.describe()}); {self.fitting} node(s) fit"
                )
            ]
        width = max((len(n) for n in self.reasons), default=0)
        lines += [f"  {node:<{width}}  {why}" for node, why in self.reasons.items()]
        return "\n".join(lines)


_LATER = ("reasons", "counts", "fitting")


def place(
    request: PlacementRequest, nodes: Iterable[NodeCandidate] | NodeIndex, *, explain: bool = True
) -> Decision:
    """Choose a node and cards for one replica of the request, or say why none can take it.

    ``explain=False`` leaves out the reasons of nodes that fit but scored
    lower (a reconcile pass placing hundreds of models needs only the choice,
    or the refusal); every other reason is kept. ``nodes`` a ``NodeIndex``:
    the same decision, found without weighing every node (see the module's
    docstring).
    """
    if isinstance(nodes, NodeIndex):
        # search.py builds on this module's Decision and scan.
        from llmgw.placement.search import place_indexed

        return place_indexed(request, nodes, explain=explain)
    return scan(request, nodes, explain=explain)


def scan(
    request: PlacementRequest, nodes: Iterable[NodeCandidate], *, explain: bool = True
) -> Decision:
    """place() weighing every node: the reference the index's search must agree with."""
    nodes = list(nodes)
    prep = request.prepared()
    base = {"model": request.model, "profile": request.profile, "engine": request.engine}
    if not prep.layouts:
        why = request.plan.refused or "the plan has no layout to place"
        if request.cpu and request.plan.layouts:
            why = "the profile runs on CPU and the plan has only GPU layouts"
        return Decision(
            **base,
            reasons={n.node_id: f"nothing to place: {why}" for n in _by_id(nodes)},
            refused=f"nothing to place: {why}",
            counts={"nothing to place": len(nodes)} if nodes else {},
        )

    reasons: dict[str, str] = {}
    tally: dict[str, list] = {}  # category -> [rank, count]
    fits: list[tuple] = []
    largest_card = largest_host = most_cards = most_cores = 0
    reason = None
    # Nodes alike in every respect placement looks at are weighed once for
    # all of them (a fleet is mostly a few kinds of machine, most of them
    # empty): the work follows the kinds of node, not their number.
    alike: dict[tuple, list[NodeCandidate]] = {}
    cached_model = request.model
    for node in nodes:
        key = (node.likeness(), cached_model in node.models_cached)
        group = alike.get(key)
        if group is None:
            alike[key] = [node]
        else:
            group.append(node)
    # Locals: this loop runs once per kind of node per decision.
    chain, fit_one, key_of = CHAIN, fit_prepared, score_key
    for group in alike.values():
        node = group[0]
        for f in chain:
            reason = f(request, node)
            if reason is not None:
                break
        if reason is not None:
            for member in group:
                reasons[member.node_id] = reason
            _count(tally, category(f, request, node), _RANK[f], len(group))
            continue
        fit = fit_one(prep, node)
        if type(fit) is Misfit:
            for member in group:
                reasons[member.node_id] = fit.reason
            _count(tally, fit.category, len(CHAIN) + _MEMORY_RANK[fit.category], len(group))
            if fit.category == SHORT_GPU:
                largest_card = max(largest_card, fit.largest_free_bytes)
            elif fit.category == SHORT_HOST:
                largest_host = max(largest_host, fit.largest_free_bytes)
            elif fit.category == SHORT_CORES:
                most_cores = max(most_cores, fit.free_cores)
            else:
                most_cards = max(most_cards, fit.suitable_cards)
            continue
        key = key_of(request, node, fit)
        head = key[:-1]
        for member in group:
            fits.append((key if member is node else (*head, member.node_id), fit))

    counts = {c: n for c, (_, n) in sorted(tally.items(), key=lambda kv: (kv[1][0], kv[0]))}
    if not fits:
        return Decision(
            **base,
            reasons=dict(sorted(reasons.items())),
            refused=_refusal(prep, counts, largest_card, largest_host, most_cards, most_cores),
            counts=counts,
        )

    best_key, best = min(fits, key=itemgetter(0))
    if explain:
        for key, fit in fits:
            if key is not best_key:
                reasons[key[-1]] = why_lower(key, best_key, fit)
    need = best.need
    placement = Placement(
        node_id=best_key[-1],
        layout=need.layout,
        layout_index=need.index,
        gpu_indexes=list(best.gpu_indexes),
        per_gpu_bytes={i: need.need_bytes for i in best.gpu_indexes},
        host_memory_bytes=need.host_bytes,
        score=score_of(best_key),
        cores=need.cores,
    )
    return Decision(
        **base,
        placement=placement,
        reasons=dict(sorted(reasons.items())) if explain else reasons,
        counts=counts,
        fitting=len(fits),
    )


def _by_id(nodes: list[NodeCandidate]) -> list[NodeCandidate]:
    return sorted(nodes, key=lambda n: n.node_id)


def _count(tally: dict[str, list], name: str, rank: int, n: int = 1) -> None:
    entry = tally.get(name)
    if entry is None:
        tally[name] = [rank, n]
    else:
        entry[1] += n


def _refusal(prep, counts: dict[str, int], card: int, host: int, cards: int, cores: int = 0) -> str:
    if not counts:
        return "no node can run it: the cluster has no nodes"
    gpu_layouts = [n for n in prep.layouts if n.gpu]
    cpu_layouts = [n for n in prep.layouts if not n.gpu]
    parts = []
    for name, n in counts.items():
        text = f"{n} {name}"
        if name == SHORT_GPU:
            needs = " or ".join(
                gib(x.need_bytes) + ("" if x.cards == 1 else f" on each of {x.cards} cards")
                for x in gpu_layouts
            )
            text += f" (largest free card {gib(card)}, needs {needs})"
        elif name == SHORT_HOST:
            least = min(x.host_bytes for x in cpu_layouts)
            text += f" (most free {gib(host)}, needs {gib(least)})"
        elif name == SHORT_CORES:
            text += f" (most free {cores}, needs {prep.cores})"
        elif name == TOO_FEW_GPUS:
            least = min(x.cards for x in gpu_layouts)
            text += f" (at most {cards} suitable, needs {least})"
        parts.append(text)
    return "no node can run it: " + ", ".join(parts)
