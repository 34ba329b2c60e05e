"""An index of a cluster's nodes, so a decision need not weigh every node.

A large fleet is a few kinds of machine, in a few states, each with some of
its memory in use. The index groups its nodes twice:

- a *class*: nodes alike in their hardware and in what the filter chain
  decides on (state, overlays, which engines failed or can be installed).
  The chain runs once per class; a class it refuses is counted whole.
  Labels do not split classes (a label unique to each node would make
  every node a class of its own): each class keeps its members by label
  instead, and a request's selector becomes a gate on its members.
- a *group*, within a class: nodes with the same memory in use. They fit
  alike and score alike, but for their ids and cached weights.

Each class keeps its groups in the order pack-before-spread ranks them
(most GPU memory in use first, most host memory for CPU layouts) and, per
kind of card a layout asks for and count of cards k, a *ladder*: its groups
sorted by their k-th most free card, so the groups that can hold a layout
are a slice found by bisection. search.py walks these instead of the nodes.

Reservations made while the index lives (``NodeCandidate.reserve``) move
the node to the group of its new usage as they happen; the index also keeps
what each node held before, so a decision can work out its reasons later
as they were at the moment it was made.

Pure, like the rest of placement: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator
from itertools import count

from llmgw.inventory import Inventory
from llmgw.placement.candidates import ROLE_LABEL, NodeCandidate, NodeStatic, free_of

# A node's memory in use, as fit reads it: ((card index, bytes), …) for the
# cards with anything on them, host bytes, and CPU cores reserved.
Usage = tuple[tuple[tuple[int, int], ...], int, int]


def usage_of(node: NodeCandidate) -> Usage:
    used = tuple(sorted((i, n) for i, n in node.gpu_used_bytes.items() if n))
    return used, node.host_memory_used_bytes, node.cores_used


class Group:
    """Nodes of one class with the same memory in use."""

    __slots__ = ("cls", "cores_used", "frees", "gpu_used", "host_used", "members", "seq", "usage")

    def __init__(self, seq: int, cls: NodeClass, usage: Usage) -> None:
        self.seq = seq
        self.cls = cls
        self.usage = usage
        # Positions in the index (node id order), ascending.
        self.members: list[int] = []
        self.gpu_used = sum(n for _, n in usage[0])
        self.host_used = usage[1]
        self.cores_used = usage[2]
        # Kind of card -> [(free, index)] ascending, as fit.py orders them.
        self.frees: dict[tuple, list[tuple[int, int]]] = {}

    def frees_for(self, kind: tuple, eligible: tuple) -> list[tuple[int, int]]:
        found = self.frees.get(kind)
        if found is None:
            used = dict(self.usage[0])
            static = self.cls.static
            found = self.frees[kind] = sorted((free_of(static, i, t, used), i) for i, t in eligible)
        return found


class NodeClass:
    """Nodes alike in hardware and in what the filter chain decides on, labels aside."""

    __slots__ = (
        "by_label",
        "cpu_order",
        "gpu_order",
        "groups",
        "host_ladder",
        "ladders",
        "rep",
        "role_holders",
        "size",
        "static",
    )

    def __init__(self, rep: NodeCandidate) -> None:
        # Any member stands for all in the filters but labels_match.
        self.rep = rep
        self.static: NodeStatic = rep.static()
        self.size = 0
        # (key, value) -> positions of the members labelled so.
        self.by_label: dict[tuple[str, str], set[int]] = {}
        # Positions of the members with a role label (llmgw.role).
        self.role_holders: set[int] = set()
        self.groups: dict[Usage, Group] = {}
        # (-gpu bytes used, seq): the most used first; empty groups last.
        self.gpu_order: list[tuple[int, int]] = []
        # (empty, -host bytes used, seq), for CPU layouts.
        self.cpu_order: list[tuple[int, int, int]] = []
        # (kind of card, k) -> ([(k-th most free, seq)] ascending, the kind's cards).
        self.ladders: dict[tuple, tuple[list[tuple[int, int]], tuple]] = {}
        # [(host bytes free, seq)] ascending, built when first asked for.
        self.host_ladder: list[tuple[int, int]] | None = None

    def _entries(self, g: Group) -> tuple:
        empty = 1 if g.host_used == 0 and g.gpu_used == 0 else 0
        return (-g.gpu_used, g.seq), (empty, -g.host_used, g.seq)

    def add(self, g: Group) -> None:
        self.groups[g.usage] = g
        gpu, cpu = self._entries(g)
        insort(self.gpu_order, gpu)
        insort(self.cpu_order, cpu)
        for (kind, k), (ladder, eligible) in self.ladders.items():
            insort(ladder, (g.frees_for(kind, eligible)[-k][0], g.seq))
        if self.host_ladder is not None:
            insort(self.host_ladder, (self.static.host_total_bytes - g.host_used, g.seq))

    def drop(self, g: Group) -> None:
        del self.groups[g.usage]
        gpu, cpu = self._entries(g)
        _remove(self.gpu_order, gpu)
        _remove(self.cpu_order, cpu)
        for (kind, k), (ladder, eligible) in self.ladders.items():
            _remove(ladder, (g.frees_for(kind, eligible)[-k][0], g.seq))
        if self.host_ladder is not None:
            _remove(self.host_ladder, (self.static.host_total_bytes - g.host_used, g.seq))

    def ladder(self, kind: tuple, eligible: tuple, k: int) -> list[tuple[int, int]]:
        """Groups by their k-th most free card of this kind, ascending (k <= len(eligible))."""
        found = self.ladders.get((kind, k))
        if found is None:
            ladder = sorted(
                (g.frees_for(kind, eligible)[-k][0], g.seq) for g in self.groups.values()
            )
            found = self.ladders[(kind, k)] = (ladder, eligible)
        return found[0]

    def hosts(self) -> list[tuple[int, int]]:
        """Groups by host memory free, ascending."""
        if self.host_ladder is None:
            total = self.static.host_total_bytes
            self.host_ladder = sorted((total - g.host_used, g.seq) for g in self.groups.values())
        return self.host_ladder


def _remove(entries: list, entry: tuple) -> None:
    i = bisect_left(entries, entry)
    if i < len(entries) and entries[i] == entry:
        del entries[i]


def _engines_key(node: NodeCandidate) -> tuple:
    """What engine_runs decides on: which engines the node has and which of them failed.

    Not the node's words ("installing: downloading … (16 MB)"), which change
    as it goes and would split a fleet installing an engine into classes of
    one; they are read for the reasons, which the scan gives.
    """
    return (
        frozenset(node.installable_engines),
        tuple(sorted((e, w.startswith("failed")) for e, w in node.engines_installed.items())),
    )


def _class_key(node: NodeCandidate, hardware: dict[int, tuple]) -> tuple:
    static = node.static()
    kind = hardware.get(id(static))
    if kind is None:
        kind = hardware[id(static)] = (
            static.cards,
            tuple(sorted(static.links.items())),
            static.host_total_bytes,
            static.cpu_total,
            node.inventory.host.gpu_note,
        )
    return (kind, node.state, node.cordoned, node.draining, _engines_key(node))


class NodeIndex:
    """A cluster's nodes for placement, indexed; ``place(request, index)`` uses it.

    Build one per reconcile pass (the nodes as they are at its start) and
    reserve each placement on its node as usual: the index follows. Node ids
    must be unique. Changing a node other than through ``reserve`` while it
    is indexed is not supported.
    """

    def __init__(self, nodes: Iterable[NodeCandidate]) -> None:
        self._nodes = sorted(nodes, key=lambda n: n.node_id)
        self._pos = {n.node_id: i for i, n in enumerate(self._nodes)}
        if len(self._pos) != len(self._nodes):
            raise ValueError("node ids must be unique in a NodeIndex")
        self._seq = count()
        self.groups: dict[int, Group] = {}
        self._group_of: list[Group] = []
        self._cached: dict[str, list[int]] = {}
        # (position, GPU bytes used, host bytes used, cores) before each reservation.
        self._journal: list[tuple[int, dict[int, int], int, int]] = []
        self._inventories: list[Inventory] | None = None
        classes: dict[tuple, NodeClass] = {}
        hardware: dict[int, tuple] = {}
        for pos, node in enumerate(self._nodes):
            key = _class_key(node, hardware)
            cls = classes.get(key)
            if cls is None:
                cls = classes[key] = NodeClass(node)
            cls.size += 1
            for item in node.labels.items():
                cls.by_label.setdefault(item, set()).add(pos)
            if node.labels.get(ROLE_LABEL):
                cls.role_holders.add(pos)
            self._group_of.append(self._join(cls, usage_of(node), pos))
            for model in node.models_cached:
                self._cached.setdefault(model, []).append(pos)
            node.watch(self)
        self.classes = list(classes.values())

    def __iter__(self) -> Iterator[NodeCandidate]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def inventories(self) -> list[Inventory]:
        """Every node's inventory, in node id order (listed once: planning reads it per model)."""
        if self._inventories is None:
            self._inventories = [n.inventory for n in self._nodes]
        return self._inventories

    def get(self, node_id: str) -> NodeCandidate | None:
        pos = self._pos.get(node_id)
        return None if pos is None else self._nodes[pos]

    def node(self, pos: int) -> NodeCandidate:
        return self._nodes[pos]

    def group_of(self, pos: int) -> Group:
        return self._group_of[pos]

    def cached(self, model: str) -> list[int]:
        """Positions of the nodes with the model's weights on their disk."""
        return self._cached.get(model, [])

    def _join(self, cls: NodeClass, usage: Usage, pos: int) -> Group:
        g = cls.groups.get(usage)
        if g is None:
            g = Group(next(self._seq), cls, usage)
            self.groups[g.seq] = g
            cls.add(g)
        insort(g.members, pos)
        return g

    # ---- reservations ---------------------------------------------------

    def _own(self, node: NodeCandidate) -> int | None:
        pos = self._pos.get(node.node_id)
        return pos if pos is not None and self._nodes[pos] is node else None

    def before_reserve(self, node: NodeCandidate) -> None:
        pos = self._own(node)
        if pos is not None:
            self._journal.append(
                (pos, dict(node.gpu_used_bytes), node.host_memory_used_bytes, node.cores_used)
            )

    def after_reserve(self, node: NodeCandidate) -> None:
        pos = self._own(node)
        if pos is None:
            return
        old = self._group_of[pos]
        usage = usage_of(node)
        if usage == old.usage:
            return
        old.members.remove(pos)
        if not old.members:
            old.cls.drop(old)
            del self.groups[old.seq]
        self._group_of[pos] = self._join(old.cls, usage, pos)

    def version(self) -> int:
        """A mark of the reservations made so far, for ``nodes_at``."""
        return len(self._journal)

    def nodes_at(self, version: int) -> list[NodeCandidate]:
        """The nodes as they were at ``version``: reserved ones copied back to their usage then."""
        nodes = list(self._nodes)
        restored: set[int] = set()
        for pos, used, host, cores in self._journal[version:]:
            if pos in restored:
                continue
            restored.add(pos)
            now = nodes[pos]
            fields = {name: getattr(now, name) for name in NodeCandidate.model_fields}
            fields.update(gpu_used_bytes=used, host_memory_used_bytes=host, cores_used=cores)
            nodes[pos] = NodeCandidate(**fields)
        return nodes
