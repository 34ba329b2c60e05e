"""What placement reads: the nodes it may choose from and what is asked of them.

``NodeCandidate`` is one node as the controller sees it at the moment of a
decision: its state, the operator's overlays, what it can run, its hardware
and what is already reserved on it. ``PlacementRequest`` is one replica of one
model profile with the plan of layouts that could run it.

Both are pydantic for the controller's and the tests' sake, but a decision
reads them thousands of times over a large cluster, so each keeps a small
cache of facts derived from its fields (``static()``, ``prepared()``). The
caches hold no state of their own: they are rebuilt when the inventory or the
plan object is replaced, and never take part in equality.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from llmgw.catalog.model import GpuNeed, Model, Profile
from llmgw.inventory import GpuInfo, Inventory
from llmgw.modelplan.types import Layout, Plan

GIB = 1024**3
# The label that reserves a node for one kind of work (e.g. the judges'
# machines): such a node takes only requests that ask for its role, or any
# other model would end up beside the judges and slow them down.
ROLE_LABEL = "llmgw.role"


def gib(n: int) -> str:
    """Bytes as operators read them in reasons: '41.5 GiB'."""
    return f"{n / GIB:.1f} GiB"


def cc_tuple(text: str) -> tuple[int, int] | None:
    """'8.9' -> (8, 9); None when empty or malformed."""
    major, dot, minor = text.partition(".")
    if not dot or not major.isdigit() or not minor.isdigit():
        return None
    return int(major), int(minor)


# Facts of a kind of node -> a number for it. A dict lookup of a big tuple
# hashes it every time; the number hashes for free in placement's hot loop.
_LIKENESS: dict[tuple, int] = {}
_LIKENESS_MAX = 100_000


class _Cache:
    """A slot for derived facts that never makes two models unequal."""

    __slots__ = ("key", "value")

    def __init__(self) -> None:
        self.key: Any = None
        self.value: Any = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Cache)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        # A copy or a pickle starts empty: what it held is worked out again,
        # and the weak references of _watchers cannot be pickled anyway.
        return (_Cache, ())


class NodeStatic:
    """Facts of a node's hardware that do not change between decisions."""

    __slots__ = (
        "_eligible",
        "cards",
        "cards_text",
        "cpu_total",
        "gpu_total_bytes",
        "host_total_bytes",
        "largest_linked",
        "links",
        "mig",
        "mig_note",
        "nvlink",
    )

    def __init__(self, inventory: Inventory) -> None:
        # The units placement hands out: whole cards, and the MIG instances
        # of cards split into them. A card in MIG mode is never one itself:
        # its memory belongs to its instances, and CUDA shows a process one
        # instance, not the card.
        units = [g for g in inventory.gpus if g.mig_instance or g.mig_mode != "enabled"]
        # (index, total bytes, cc tuple or None, name, cc text, MIG instance) per unit.
        self.cards = tuple(
            (
                g.index,
                g.memory_total_bytes,
                cc_tuple(g.compute_capability),
                g.name,
                g.compute_capability,
                g.mig_instance,
            )
            for g in units
        )
        # Indexes of the MIG instances: one card per layout, one replica each.
        self.mig = frozenset(g.index for g in units if g.mig_instance)
        self.mig_note = _mig_note(inventory)
        self.gpu_total_bytes = sum(c[1] for c in self.cards)
        # Filled by filters._cards the first time a reason needs it.
        self.cards_text: str | None = None
        self.host_total_bytes = inventory.host.memory_total_bytes
        # 0 when the node did not say: cores are then not counted on it.
        self.cpu_total = inventory.host.cpu_count
        indexes = {c[0] for c in self.cards}
        # NVLink is symmetric; a recording that names the link on one side
        # only still means the two cards are joined. A MIG instance has no
        # link of its own: tensor parallel never spans instances.
        links: dict[int, set[int]] = {i: set() for i in indexes}
        for g in units:
            if g.mig_instance:
                continue
            for p in g.nvlink_peers:
                if p in indexes and p != g.index and p not in self.mig:
                    links[g.index].add(p)
                    links[p].add(g.index)
        self.links = {i: frozenset(s) for i, s in links.items()}
        # "all": an NVSwitch or full mesh, any set of cards is joined, so the
        # search for joined cards can be skipped; "none": likewise, nothing to find.
        if not self.cards or all(not s for s in self.links.values()):
            self.nvlink = "none"
        elif all(len(s) == len(indexes) - 1 for s in self.links.values()):
            self.nvlink = "all"
        else:
            self.nvlink = "some"
        # The most cards all joined to each other: two bridged pairs make 2,
        # not 4, and a search for 4 joined cards there can stop before it starts.
        self.largest_linked = (
            _largest_clique(self.links)
            if self.nvlink == "some"
            else (len(self.cards) if self.nvlink == "all" else 1)
        )
        self._eligible: dict[tuple, tuple] = {}

    def eligible(
        self,
        min_cc: tuple[int, int] | None,
        min_total_bytes: int,
        card_name: str = "",
        whole_only: bool = False,
    ) -> tuple[tuple[int, int], ...]:
        """(index, total bytes) of the cards of the needed kind, memoised per need.

        ``card_name`` (a layout's planned card, "" for any) keeps only cards of
        that name; ``whole_only`` leaves out MIG instances (a layout on more than one card).
        """
        return self.cards_for(min_cc, min_total_bytes, card_name, whole_only)[0]

    def eligible_names(self, min_cc: tuple[int, int] | None, min_total_bytes: int) -> frozenset:
        """The names of the cards of the needed kind."""
        return self.cards_for(min_cc, min_total_bytes, "")[2]

    def cards_for(
        self,
        min_cc: tuple[int, int] | None,
        min_total_bytes: int,
        card_name: str = "",
        whole_only: bool = False,
    ) -> tuple[tuple, list, frozenset]:
        """For one need: the cards' (index, total), their fit order when idle, their names.

        The fit order is (free, index) ascending, fullest first. Most nodes of
        a large cluster have nothing placed on them; their order is the same
        every decision, so it is worked out once.
        """
        key = (min_cc, min_total_bytes, card_name, whole_only and bool(self.mig))
        found = self._eligible.get(key)
        if found is None:
            cards = tuple(
                c
                for c in self.cards
                if (min_cc is None or (c[2] is not None and c[2] >= min_cc))
                and c[1] >= min_total_bytes
                and (not card_name or c[3] == card_name)
                and not (whole_only and c[5])
            )
            found = self._eligible[key] = (
                tuple((c[0], c[1]) for c in cards),
                sorted((c[1], c[0]) for c in cards),
                frozenset(c[3] for c in cards),
            )
        return found


# id(inventory) -> (weak reference to it, its NodeStatic). The controller
# builds new NodeCandidates every pass around the inventory object it keeps
# per registration: the hardware facts are worked out once per registration,
# not once per pass. An entry goes with its inventory.
_STATICS: dict[int, tuple[weakref.ref, NodeStatic]] = {}


def _static_of(inventory: Inventory) -> NodeStatic:
    key = id(inventory)
    entry = _STATICS.get(key)
    if entry is not None and entry[0]() is inventory:
        return entry[1]
    static = NodeStatic(inventory)
    _STATICS[key] = (weakref.ref(inventory, lambda _, key=key: _STATICS.pop(key, None)), static)
    return static


def free_of(static: NodeStatic, index: int, total: int, used: dict[int, int]) -> int:
    """A unit's free bytes as fit compares them: a MIG instance holds one replica.

    Anything on an instance (a replica, or a process not ours) takes it
    whole: CUDA gives each process the instance, and two engines on one
    would fight over its memory and its compute slices.
    """
    held = used.get(index, 0)
    if held and index in static.mig:
        return 0
    return total - held


def _mig_note(inventory: Inventory) -> str:
    """'GPU 0 is split into MIG instances (7 × 1g.10gb, GPUs 1-7); …', or ''."""
    parents = [g for g in inventory.gpus if g.mig_mode == "enabled" and not g.mig_instance]
    if not parents:
        return ""
    parts = []
    for parent in parents:
        mine = [g for g in inventory.gpus if g.mig_instance and g.mig_parent_index == parent.index]
        if not mine:
            parts.append(f"GPU {parent.index} is in MIG mode with no instances made")
            continue
        profiles = Counter(g.mig_profile or "unknown" for g in mine)
        kinds = ", ".join(f"{n} × {p}" for p, n in profiles.items())
        parts.append(
            f"GPU {parent.index} is split into MIG instances ({kinds}: "
            f"GPU{'s' if len(mine) > 1 else ''} {_span([g.index for g in mine])})"
        )
    return (
        "; ".join(parts) + "; a MIG instance takes one replica on one card, "
        "never a layout across cards"
    )


def _span(indexes: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3, 5'."""
    indexes = sorted(indexes)
    runs: list[list[int]] = []
    for i in indexes:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _largest_clique(links: dict[int, frozenset[int]]) -> int:
    """Size of the largest set of cards all joined to each other (Bron–Kerbosch)."""
    best = 1

    def grow(size: int, candidates: set[int], excluded: set[int]) -> None:
        nonlocal best
        if not candidates and not excluded:
            best = max(best, size)
            return
        for v in list(candidates):
            grow(size + 1, candidates & links[v], excluded & links[v])
            candidates.discard(v)
            excluded.add(v)

    grow(0, set(links), set())
    return best


class NodeCandidate(BaseModel):
    """One node as placement sees it at the moment of a decision."""

    model_config = ConfigDict(extra="forbid")

    node_id: str
    # registering, ready, not_ready, gone: only "ready" takes new replicas.
    state: str = "ready"
    cordoned: bool = False
    draining: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    # Engines the agent says it can install on this machine.
    installable_engines: list[str] = Field(default_factory=list)
    # Engine -> the node's own words for its state: "installed 0.9.2",
    # "installing: downloading llama-b… (16 MB)", "failed: libstdc++.so.6 is too old".
    engines_installed: dict[str, str] = Field(default_factory=dict)
    inventory: Inventory
    # GPU index -> bytes held by replicas already placed plus foreign use.
    gpu_used_bytes: dict[int, int] = Field(default_factory=dict)
    host_memory_used_bytes: int = 0
    # CPU cores reserved by replicas already placed (of the host's cpu_count).
    cores_used: int = 0
    # Model names whose weights are already on the node's disk.
    models_cached: set[str] = Field(default_factory=set)

    _static: _Cache = PrivateAttr(default_factory=_Cache)
    # The node's likeness: nodes with equal likeness answer every filter,
    # fit and score alike (but for their ids), so placement weighs one of
    # them for all. Changing a node after its first decision (other than
    # through reserve) is not supported.
    _likeness: _Cache = PrivateAttr(default_factory=_Cache)
    # Indexes (index.NodeIndex) holding this node, told of every reservation
    # so they keep their buckets right; weak, so a pass's index dies with it.
    _watchers: _Cache = PrivateAttr(default_factory=_Cache)

    def likeness(self) -> int:
        """A small number equal for nodes that are alike (hashing the facts once)."""
        cache = self.__pydantic_private__["_likeness"]
        if cache.value is None:
            static = self.static()
            facts = (
                static.cards,
                static.host_total_bytes,
                static.cpu_total,
                tuple(sorted(static.links.items())),
                self.inventory.host.gpu_note,
                self.state,
                self.cordoned,
                self.draining,
                tuple(sorted(self.labels.items())),
                tuple(self.installable_engines),
                tuple(sorted(self.engines_installed.items())),
                tuple(sorted(self.gpu_used_bytes.items())),
                self.host_memory_used_bytes,
                self.cores_used,
                frozenset(self.models_cached),
            )
            if len(_LIKENESS) > _LIKENESS_MAX:
                _LIKENESS.clear()  # stale kinds from earlier clusters; ids only compare in a call
            cache.value = _LIKENESS.setdefault(facts, len(_LIKENESS))
        return cache.value

    def static(self) -> NodeStatic:
        """The node's hardware facts, derived once per inventory object."""
        # Straight to pydantic's slot: the ordinary attribute path for a
        # private attribute costs more than the rest of a node's filters.
        cache = self.__pydantic_private__["_static"]
        if cache.key is not self.inventory:
            cache.key, cache.value = self.inventory, _static_of(self.inventory)
        return cache.value

    def free_bytes(self, gpu: GpuInfo | int) -> int:
        """Memory of one card not reserved by anything (never below zero)."""
        index = gpu if isinstance(gpu, int) else gpu.index
        static = self.static()
        total = next((c[1] for c in static.cards if c[0] == index), 0)
        return max(0, free_of(static, index, total, self.gpu_used_bytes))

    @property
    def host_free_bytes(self) -> int:
        return max(0, self.inventory.host.memory_total_bytes - self.host_memory_used_bytes)

    @property
    def cores_free(self) -> int:
        return max(0, self.inventory.host.cpu_count - self.cores_used)

    def reserve(
        self, per_gpu_bytes: dict[int, int], host_memory_bytes: int = 0, cores: int = 0
    ) -> None:
        """Count a placement's memory as used, so the next decision sees it taken.

        The reconciler places one model after another within a pass; without
        this, two models would both be given the same free card.
        """
        watchers = [w() for w in self.__pydantic_private__["_watchers"].value or ()]
        watchers = [w for w in watchers if w is not None]
        for w in watchers:
            w.before_reserve(self)
        for index, n in per_gpu_bytes.items():
            self.gpu_used_bytes[index] = self.gpu_used_bytes.get(index, 0) + n
        self.host_memory_used_bytes += host_memory_bytes
        self.cores_used += cores
        # Its likeness changed: worked out again on the next decision.
        self.__pydantic_private__["_likeness"].value = None
        for w in watchers:
            w.after_reserve(self)

    def watch(self, index: Any) -> None:
        """Tell ``index`` (weakly held) before and after every reservation on this node."""
        cache = self.__pydantic_private__["_watchers"]
        alive = [w for w in cache.value or () if w() is not None and w() is not index]
        cache.value = [*alive, weakref.ref(index)]


class LayoutNeed:
    """One layout of a plan, reduced to what the hot loop compares."""

    __slots__ = (
        "card_name",
        "cards",
        "cores",
        "gpu",
        "host_bytes",
        "index",
        "layout",
        "need_bytes",
        "tp",
    )

    def __init__(self, index: int, layout: Layout, cores: int = 0) -> None:
        self.index = index
        self.layout = layout
        self.gpu = layout.kind == "gpu"
        self.cards = max(1, layout.gpus or layout.tensor_parallel) if self.gpu else 0
        self.need_bytes = layout.per_card.total_bytes if layout.per_card else 0
        self.host_bytes = layout.host_memory_bytes
        # Cores reserved on the node: CPU layouts only (a GPU replica's
        # threads feed its cards and are not counted).
        self.cores = 0 if self.gpu else cores
        self.tp = layout.tensor_parallel
        # Planning fits a layout's context to one kind of card (its 90% of
        # that card's memory); on another kind the same bytes may leave no
        # headroom, so a named layout goes only on cards of that name.
        self.card_name = layout.card_name if self.gpu else ""

    def shape(self) -> str:
        """'1 card', '4 cards, TP 4', '2 × NVIDIA L4, TP 2', 'CPU'."""
        if not self.gpu:
            return "CPU"
        split = f", TP {self.tp}" if self.tp > 1 else ""
        if self.card_name:
            return f"{self.cards} × {self.card_name}{split}"
        return ("1 card" if self.cards == 1 else f"{self.cards} cards") + split

    def describe(self) -> str:
        """The shape with its memory: '2 cards, TP 2, 41.5 GiB each'."""
        if not self.gpu:
            cores = f", {self.cores} core{'s' if self.cores != 1 else ''}" if self.cores else ""
            return f"CPU, {gib(self.host_bytes)} of host memory{cores}"
        each = "" if self.cards == 1 else " each"
        return f"{self.shape()}, {gib(self.need_bytes)}{each}"


class Prepared:
    """A request's needs in the form the filters and fit compare against."""

    __slots__ = (
        "card_names",
        "cores",
        "layouts",
        "min_cc",
        "min_cc_text",
        "min_total_bytes",
        "needs_gpu",
        "role",
    )

    def __init__(self, request: PlacementRequest) -> None:
        need = request.gpu or GpuNeed()
        self.min_cc_text = need.min_compute_capability
        self.min_cc = cc_tuple(need.min_compute_capability)
        self.min_total_bytes = need.min_memory_bytes
        layouts = [LayoutNeed(i, lay, request.cores) for i, lay in enumerate(request.plan.layouts)]
        if request.cpu:
            layouts = [lay for lay in layouts if not lay.gpu]
        self.layouts = tuple(layouts)
        # Cores a CPU layout of this request reserves (0: none counted).
        self.cores = request.cores if any(not lay.gpu for lay in layouts) else 0
        # Only when every layout needs GPUs can a node without a suitable
        # card be dropped before fitting; otherwise its CPU may still do.
        self.needs_gpu = bool(layouts) and all(lay.gpu for lay in layouts)
        self.role = request.labels.get(ROLE_LABEL, "")
        # The cards the GPU layouts were planned for; empty when any will do
        # (a layout without a card name, as hand-made plans have).
        names = [lay.card_name for lay in layouts if lay.gpu]
        self.card_names = () if not all(names) else tuple(dict.fromkeys(names))


class PlacementRequest(BaseModel):
    """One replica of one model profile to place, with the plan that sizes it."""

    model_config = ConfigDict(extra="forbid")

    model: str
    profile: str = "default"
    engine: str
    gpu: GpuNeed | None = None
    # The profile runs on CPU only: GPU layouts of the plan are ignored.
    cpu: bool = False
    # Labels the node must carry (the model's selector).
    labels: dict[str, str] = Field(default_factory=dict)
    plan: Plan
    # CPU cores a replica placed with a CPU layout reserves on its node.
    cores: int = 0

    _prepared: _Cache = PrivateAttr(default_factory=_Cache)

    @classmethod
    def for_profile(cls, model: Model, profile: Profile, plan: Plan) -> PlacementRequest:
        """The request for one replica of a catalog model run by one of its profiles."""
        return cls(
            model=model.name,
            profile=profile.name,
            engine=profile.engine,
            gpu=profile.gpu,
            cpu=profile.cpu,
            labels=dict(model.labels),
            plan=plan,
            cores=profile.cores,
        )

    def prepared(self) -> Prepared:
        cache = self.__pydantic_private__["_prepared"]
        # Rebuilt when a field is given a new object; a request is not meant
        # to be edited in place once placed.
        key = cache.key
        if (
            key is None
            or key[0] is not self.plan
            or key[1] is not self.gpu
            or key[2] is not self.cpu
            or key[3] is not self.labels
            or key[4] != self.cores
        ):
            key = (self.plan, self.gpu, self.cpu, self.labels, self.cores)
            cache.key, cache.value = key, Prepared(self)
        return cache.value
