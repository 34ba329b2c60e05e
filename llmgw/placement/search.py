"""The decision on a NodeIndex: the scan's choice, without weighing every node.

The score key (scorers.py) is compared left to right, and for a node whose
first fitting layout is known, most of it is known without fitting it card
by card: GPUs or CPU, the card count and context of that layout, whether its
cards can be joined by NVLink (fixed for most topologies), whether the node
is empty, whether its weights are cached, its share of memory in use. So:

1. The filter chain runs once per class of nodes (index.py), its label
   filter once per class as a gate on the members; a class refused is
   counted whole.
2. Nodes with the model's weights cached are few; each is weighed in full.
3. For each class and layout, best prefix first, the class's groups are
   walked most used first (the order pack-before-spread ranks them in),
   keeping those whose first fitting layout it is, until the lower bound of
   the next group's key is worse than the best key found. A group's key is
   worked out in full (fit.py, scorers.py: the scan's own code) only when
   it could win. Where a ladder shows few groups can hold the layout at
   all, or the gate lets few members through, only those are looked at.

Only the winner's key and fit are needed for the placement. The reasons of
every other node, the counts and how many fit are left for later: the
decision fills them in from a scan of the nodes as they were (index.py
keeps their usage at the time) when one of them is first read. A refusal's
one-line summary is made at once, from the classes alone: when nothing
fits, every node of a class that passed the filters misses for the same
kind of reason.
"""

from __future__ import annotations

from bisect import bisect_left

from llmgw.placement.candidates import (
    ROLE_LABEL,
    LayoutNeed,
    NodeCandidate,
    NodeStatic,
    PlacementRequest,
)
from llmgw.placement.decide import (
    _MEMORY_RANK,
    _RANK,
    Decision,
    Placement,
    _count,
    _refusal,
    scan,
)
from llmgw.placement.filters import CHAIN, category, labels_match
from llmgw.placement.fit import SHORT_GPU, SHORT_HOST, TOO_FEW_GPUS, Fit, fit_prepared
from llmgw.placement.index import Group, NodeClass, NodeIndex
from llmgw.placement.scorers import score_key, score_of

# When a ladder shows at most this many groups can hold a layout (or a
# label gate lets at most this many members through), those are weighed
# directly instead of walking the class most used first.
FEW_GROUPS = 64
# Positions of the key a group's lower bound covers (through the layout index).
_BOUND = 9
# The chain around its label filter: the filters before and after it read
# only what a class's members share.
_AT = CHAIN.index(labels_match)
_BEFORE, _AFTER = CHAIN[:_AT], CHAIN[_AT + 1 :]
_EMPTY: frozenset[int] = frozenset()


class _Gate:
    """Which members of a class the request's labels let through (labels_match)."""

    __slots__ = ("allowed", "count", "denied")

    def __init__(self, request: PlacementRequest, cls: NodeClass) -> None:
        wanted = request.labels
        # Every member but these (the common case: no selector), or exactly these.
        self.denied: set[int] | frozenset[int] = _EMPTY
        self.allowed: set[int] | None = None
        if not wanted:
            self.denied = cls.role_holders  # kept for a role nobody asked for
            self.count = cls.size - len(self.denied)
            return
        sets = sorted((cls.by_label.get(item, _EMPTY) for item in wanted.items()), key=len)
        allowed = set(sets[0]).intersection(*sets[1:])
        if ROLE_LABEL not in wanted:
            allowed -= cls.role_holders
        # (A role asked for is among the labels wanted: its holders are all in.)
        self.allowed = allowed
        self.count = len(allowed)

    def allows(self, pos: int) -> bool:
        if self.allowed is not None:
            return pos in self.allowed
        return pos not in self.denied

    def first(self, g: Group, index: NodeIndex, cached: frozenset) -> int | None:
        """The lowest position of the group it lets through without cached weights."""
        allowed = self.allowed
        if allowed is not None and len(allowed) < len(g.members):
            found = [p for p in allowed if p not in cached and index.group_of(p) is g]
            return min(found) if found else None
        for p in g.members:
            if p not in cached and self.allows(p):
                return p
        return None


class _Row:
    """One layout of the plan on one class: what its first-fit test compares."""

    __slots__ = ("eligible", "k", "kind", "need", "pos", "prefix")

    def __init__(self, pos: int, need: LayoutNeed, kind: tuple | None, eligible: tuple) -> None:
        self.pos = pos
        self.need = need
        self.kind = kind
        self.eligible = eligible
        self.k = need.cards if need.gpu else 0
        self.prefix: tuple = ()


class _Table:
    """A class's layouts for one request, and how its nodes miss when none fits."""

    __slots__ = ("cls", "gate", "has_host", "memory_rows", "most_cards", "rows")

    def __init__(self, prep, cls: NodeClass, gate: _Gate) -> None:
        self.cls = cls
        self.gate = gate
        static = cls.static
        self.rows: list[_Row] = []
        self.memory_rows: list[_Row] = []
        self.has_host = False
        self.most_cards = 0
        # As fit_prepared walks the plan: same skips, same misses.
        for need in prep.layouts:
            if not need.gpu:
                self.rows.append(_Row(len(self.rows), need, None, ()))
                self.has_host = True
                continue
            whole = need.cards > 1
            kind = (prep.min_cc, prep.min_total_bytes, need.card_name, whole)
            eligible = static.eligible(prep.min_cc, prep.min_total_bytes, need.card_name, whole)
            if not eligible and need.card_name:
                continue
            if len(eligible) < need.cards:
                self.most_cards = max(self.most_cards, len(eligible))
                continue
            row = _Row(len(self.rows), need, kind, eligible)
            self.rows.append(row)
            self.memory_rows.append(row)
        cpu_on_gpu = 1 if static.cards else 0
        for row in self.rows:
            need = row.need
            if need.gpu:
                row.prefix = (0, 0, need.cards, -need.layout.context, _unlinked_bound(need, static))
            else:
                row.prefix = (1, cpu_on_gpu, need.cards, -need.layout.context, 0)

    def first_fit(self, g: Group) -> int:
        """Position in rows of the first layout the group's nodes can hold; -1: none."""
        for row in self.rows:
            if row.k:
                if g.frees_for(row.kind, row.eligible)[-row.k][0] >= row.need.need_bytes:
                    return row.pos
            elif self.cls.static.host_total_bytes - g.host_used >= row.need.host_bytes and (
                not row.need.cores
                or not self.cls.static.cpu_total
                or self.cls.static.cpu_total - g.cores_used >= row.need.cores
            ):
                return row.pos
        return -1

    def top(self, ladder: list[tuple[int, int]], value_of, index: NodeIndex) -> int:
        """The highest value of a ladder among the groups with a member the gate lets through."""
        allowed = self.gate.allowed
        if allowed is not None and len(allowed) < len(ladder):
            return max(value_of(index.group_of(p)) for p in allowed)
        for value, seq in reversed(ladder):
            if any(self.gate.allows(p) for p in index.groups[seq].members):
                return value
        return 0


def _unlinked_bound(need: LayoutNeed, static: NodeStatic) -> int:
    """The key's NVLink component where the topology alone decides it; 0 (its least) otherwise."""
    if need.cards == 1 or need.tp <= 1:
        return 0
    if static.nvlink != "some" or need.cards > static.largest_linked:
        return 0 if static.nvlink == "all" else 1
    return 0  # bridged pairs and such: which cards are free decides


def _use(g: Group, need: LayoutNeed, static: NodeStatic) -> tuple[int, float]:
    """The key's empty-node and share-in-use components for a group, as score_key has them."""
    if need.gpu:
        total = static.gpu_total_bytes
        return (1 if g.gpu_used == 0 else 0), (min(1.0, g.gpu_used / total) if total else 0.0)
    total = static.host_total_bytes
    empty = 1 if g.host_used == 0 and g.gpu_used == 0 else 0
    return empty, (min(1.0, g.host_used / total) if total else 0.0)


def _order(g: Group, need: LayoutNeed) -> tuple:
    """The walk's order for a group: as gpu_order / cpu_order rank it."""
    if need.gpu:
        return (-g.gpu_used, g.seq)
    return (1 if g.host_used == 0 and g.gpu_used == 0 else 0, -g.host_used, g.seq)


class _Best:
    __slots__ = ("bound", "fit", "key")

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.bound: tuple | None = None
        self.fit: Fit | None = None

    def offer(self, request: PlacementRequest, prep, node: NodeCandidate) -> None:
        fit = fit_prepared(prep, node)
        key = score_key(request, node, fit)
        if self.key is None or key < self.key:
            self.key, self.fit, self.bound = key, fit, key[:_BOUND]


def _refused_by(chain, request: PlacementRequest, node: NodeCandidate):
    for f in chain:
        if f(request, node) is not None:
            return f
    return None


def place_indexed(request: PlacementRequest, index: NodeIndex, *, explain: bool = True) -> Decision:
    """place() on an index (see the module's docstring)."""
    prep = request.prepared()
    if not prep.layouts or not len(index):
        return scan(request, index, explain=explain)
    base = {"model": request.model, "profile": request.profile, "engine": request.engine}

    tally: dict[str, list] = {}
    tables: list[_Table] = []
    for cls in index.classes:
        node = cls.rep
        f = _refused_by(_BEFORE, request, node)
        if f is not None:
            _count(tally, category(f, request, node), _RANK[f], cls.size)
            continue
        gate = _Gate(request, cls)
        if gate.count < cls.size:
            refused = cls.size - gate.count
            _count(tally, category(labels_match, request, node), _RANK[labels_match], refused)
        if not gate.count:
            continue
        f = _refused_by(_AFTER, request, node)
        if f is not None:
            _count(tally, category(f, request, node), _RANK[f], gate.count)
            continue
        tables.append(_Table(prep, cls, gate))

    best = _Best()
    cached = frozenset(index.cached(request.model))
    _offer_cached(request, prep, index, tables, cached, best)
    pairs = sorted(
        ((row.prefix, row.need.index, row.pos, t) for t in tables for row in t.rows),
        key=lambda p: p[:2],
    )
    for prefix, layout_index, pos, t in pairs:
        if best.bound is not None and (*prefix, 0, 1, -1.0, layout_index) > best.bound:
            continue
        _search(request, prep, index, t, t.rows[pos], cached, best)

    version = index.version()
    later = lambda: _settle(request, index, version, explain)
    if best.key is None:
        if prep.cores:
            # Nodes of one class may miss by memory or by cores, group by
            # group: the scan says which, node by node.
            return scan(request, index, explain=explain)
        counts, refused = _refusal_of(prep, index, tables, tally)
        return Decision.later(later, **base, refused=refused, counts=counts, fitting=0)
    key, fit = best.key, best.fit
    need = fit.need
    placement = Placement(
        node_id=key[-1],
        layout=need.layout,
        layout_index=need.index,
        gpu_indexes=list(fit.gpu_indexes),
        per_gpu_bytes={i: need.need_bytes for i in fit.gpu_indexes},
        host_memory_bytes=need.host_bytes,
        score=score_of(key),
        cores=need.cores,
    )
    return Decision.later(later, **base, placement=placement)


def _offer_cached(request, prep, index: NodeIndex, tables: list[_Table], cached, best: _Best):
    """Weigh the nodes with the weights on their disk, the most promising first."""
    table_of = {id(t.cls): t for t in tables}
    seen: set[int] = set()
    bounds = []
    for pos in sorted(cached):  # ascending: the first of a group is the one that can win
        g = index.group_of(pos)
        t = table_of.get(id(g.cls))
        if t is None or g.seq in seen or not t.gate.allows(pos):
            continue
        seen.add(g.seq)
        at = t.first_fit(g)
        if at >= 0:
            row = t.rows[at]
            empty, fraction = _use(g, row.need, t.cls.static)
            bounds.append(((*row.prefix, empty, 0, -fraction, row.need.index), pos))
    bounds.sort()
    for bound, pos in bounds:
        if best.bound is not None and bound > best.bound:
            break
        best.offer(request, prep, index.node(pos))


def _search(request, prep, index: NodeIndex, t: _Table, row: _Row, cached: frozenset, best: _Best):
    """Offer ``best`` every group of the class that could beat it on this layout."""
    cls, gate, need = t.cls, t.gate, row.need
    if row.k:
        ladder = cls.ladder(row.kind, row.eligible, row.k)
        start = bisect_left(ladder, (need.need_bytes, -1))
    else:
        ladder = cls.hosts()
        start = bisect_left(ladder, (need.host_bytes, -1))
    if start == len(ladder):
        return  # no group of the class holds this layout
    groups = index.groups
    if gate.allowed is not None and len(gate.allowed) <= FEW_GROUPS:
        candidates = sorted(
            {index.group_of(p) for p in gate.allowed}, key=lambda g: _order(g, need)
        )
    elif len(ladder) - start <= FEW_GROUPS:
        candidates = sorted(
            (groups[seq] for _, seq in ladder[start:]), key=lambda g: _order(g, need)
        )
    else:
        order = cls.gpu_order if need.gpu else cls.cpu_order
        candidates = (groups[entry[-1]] for entry in order)
    static, head = cls.static, row.prefix
    for g in candidates:
        empty, fraction = _use(g, need, static)
        if best.bound is not None and (*head, empty, 1, -fraction, need.index) > best.bound:
            break  # groups come in the order of this bound: none further can win
        if t.first_fit(g) != row.pos:
            continue
        member = gate.first(g, index, cached)
        if member is not None:
            best.offer(request, prep, index.node(member))


def _refusal_of(prep, index: NodeIndex, tables: list[_Table], tally: dict[str, list]):
    """Nothing fits: each class that passed the filters misses one way; the summary line."""
    largest_card = largest_host = most_cards = 0
    for t in tables:
        if t.memory_rows:
            name = SHORT_GPU
            for row in t.memory_rows:
                ladder = t.cls.ladder(row.kind, row.eligible, 1)

                def most_free(g: Group, row: _Row = row) -> int:
                    return g.frees_for(row.kind, row.eligible)[-1][0]

                largest_card = max(largest_card, t.top(ladder, most_free, index))
        elif t.has_host:
            name = SHORT_HOST

            def host_free(g: Group, static: NodeStatic = t.cls.static) -> int:
                return static.host_total_bytes - g.host_used

            largest_host = max(largest_host, t.top(t.cls.hosts(), host_free, index))
        else:
            name = TOO_FEW_GPUS
            most_cards = max(most_cards, t.most_cards)
        _count(tally, name, len(CHAIN) + _MEMORY_RANK[name], t.gate.count)
    counts = {c: n for c, (_, n) in sorted(tally.items(), key=lambda kv: (kv[1][0], kv[0]))}
    return counts, _refusal(prep, counts, largest_card, largest_host, most_cards)


def _settle(request, index: NodeIndex, version: int, explain: bool) -> tuple[dict, dict, int]:
    """Every node's reason, the counts and how many fit: the scan of the nodes as they were."""
    full = scan(request, index.nodes_at(version), explain=explain)
    return full.reasons, full.counts, full.fitting
