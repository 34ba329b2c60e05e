"""What planning reads of a node (its shape), so that alike machines are planned once.

A plan depends on a node's kinds of card, its host memory and its measured
memory bandwidth. Agents measure the bandwidth themselves, so no two nodes
report the same figure, and hosts of one model differ by a few MiB of
memory: taken exactly, every node of a 10,000-node fleet would be its own
shape, and a decision would plan the model 10,000 times (measured: ~3 s a
decision). A shape therefore holds the bandwidth to the nearest ~10% step
and the memory rounded down to a GiB: the speed estimate moves by at most
5%, the CPU's room by under a GiB, and placement's fit checks each node's
real free memory anyway.

Pure: no I/O. ``node_shape`` of one Inventory object is worked out once
(agents' inventories are kept per registration, gatewayd/controller/
candidates.py), by ``ShapeCache``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from llmgw.inventory import GpuInfo, Inventory
from llmgw.modelplan import memory

GIB = 1 << 30
# Bandwidths within one step of each other are one shape: ~10%.
BANDWIDTH_STEP = 1.1
# Shapes of inventories no longer handed in are dropped once the cache holds
# this many more than the nodes of the latest grouping.
STALE_SHAPES_KEPT = 1000


@dataclass(frozen=True)
class CardClass:
    """The cards of one kind on a node: same name, same memory."""

    name: str
    memory_total_bytes: int
    count: int
    # The most of them all joined to each other by NVLink (0 or 1: none).
    nvlink_group: int
    # "major.minor" as NVML says it ("8.0"); "" when unknown.
    compute_capability: str = ""

    @property
    def usable_bytes(self) -> int:
        return memory.usable_card_bytes(self.memory_total_bytes)


@dataclass(frozen=True)
class Shape:
    """A node as planning sees it: its kinds of card, and its host to a GiB and ~10%."""

    classes: tuple[CardClass, ...]
    host_memory_bytes: int
    # The step's figure (see bandwidth_step_gbs); 0 when not measured.
    bandwidth_gbs: float

    @property
    def capacity_bytes(self) -> int:
        """All the memory of its cards, else of its host: whose refusal says the most."""
        cards = sum(c.memory_total_bytes * c.count for c in self.classes)
        return cards or self.host_memory_bytes


def card_classes(cards: Sequence[GpuInfo]) -> list[CardClass]:
    """The node's cards grouped by kind, in the order first seen.

    A card in MIG mode is planned through its instances, never whole, and a
    MIG instance runs a model on itself alone (no layout spans instances),
    so instances of a kind count as one card.
    """
    groups: dict[tuple[str, int, str], list[GpuInfo]] = {}
    for card in cards:
        if card.mig_mode == "enabled" and not card.mig_instance:
            continue
        key = (card.name, card.memory_total_bytes, card.compute_capability)
        groups.setdefault(key, []).append(card)
    return [
        CardClass(name, total, 1, 0, cc)
        if group[0].mig_instance
        else CardClass(name, total, len(group), _largest_nvlink_group(group), cc)
        for (name, total, cc), group in groups.items()
    ]


def _largest_nvlink_group(cards: Sequence[GpuInfo]) -> int:
    """The most cards all joined to each other: two bridged pairs are not a group of four."""
    indexes = {c.index for c in cards}
    # A card named among its own peers (a copied record) must not loop the search.
    peers = {c.index: (set(c.nvlink_peers) & indexes) - {c.index} for c in cards}
    best = 0

    def grow(group: set[int], candidates: set[int]) -> None:
        nonlocal best
        best = max(best, len(group))
        for i in sorted(candidates):
            if len(group) + len(candidates) <= best:
                return
            grow(group | {i}, candidates & peers[i])
            candidates = candidates - {i}

    grow(set(), set(indexes))
    return best if best > 1 else 0


def bandwidth_step_gbs(gbs: float) -> float:
    """A measured bandwidth on the nearest ~10% step (within 5% of it); 0 stays 0."""
    if gbs <= 0:
        return 0.0
    step = round(math.log(gbs) / math.log(BANDWIDTH_STEP))
    return round(BANDWIDTH_STEP**step, 1)


def host_memory_floor_bytes(n_bytes: int) -> int:
    """Host memory rounded down to a GiB (a host under one GiB keeps its figure)."""
    return (n_bytes // GIB) * GIB or n_bytes


def node_shape(inventory: Inventory, bandwidth_gbs: float | None = None) -> Shape:
    """The inventory's shape; ``bandwidth_gbs`` stands in for the host's measured figure."""
    host = inventory.host
    if bandwidth_gbs is None:
        bandwidth_gbs = float(getattr(host, "mem_bandwidth_gbs", 0.0) or 0.0)
    return Shape(
        classes=tuple(card_classes(inventory.gpus)),
        host_memory_bytes=host_memory_floor_bytes(host.memory_total_bytes),
        bandwidth_gbs=bandwidth_step_gbs(bandwidth_gbs),
    )


class ShapeCache:
    """Each Inventory object's shape, worked out once while the object is handed in."""

    def __init__(self) -> None:
        # id(inventory) -> (inventory, shape): the inventory is held so that
        # its id is not reused by another object while the entry lives.
        self._shapes: dict[int, tuple[Inventory, Shape]] = {}

    def shape(self, inventory: Inventory) -> Shape:
        entry = self._shapes.get(id(inventory))
        if entry is not None and entry[0] is inventory:
            return entry[1]
        shape = node_shape(inventory)
        self._shapes[id(inventory)] = (inventory, shape)
        return shape

    def group(
        self,
        inventories: Iterable[Inventory],
        bandwidth_gbs_by_host: Mapping[str, float] | None = None,
    ) -> dict[Shape, list[str]]:
        """Shape -> the hostnames of that shape, in the order the inventories come."""
        if not isinstance(inventories, Sequence):
            inventories = list(inventories)
        overrides = bandwidth_gbs_by_host or {}
        shapes: dict[Shape, list[str]] = {}
        for inventory in inventories:
            name = inventory.host.hostname
            if name in overrides:
                shape = node_shape(inventory, overrides[name])
            else:
                shape = self.shape(inventory)
            hosts = shapes.get(shape)
            if hosts is None:
                shapes[shape] = [name]
            else:
                hosts.append(name)
        if len(self._shapes) > len(inventories) + STALE_SHAPES_KEPT:
            # Inventories replaced since (a node registered again, a new
            # bandwidth figure): keep only those handed in now.
            current = {id(inv) for inv in inventories}
            self._shapes = {k: v for k, v in self._shapes.items() if k in current}
        return shapes


def group_shapes(
    inventories: Iterable[Inventory], bandwidth_gbs_by_host: Mapping[str, float] | None = None
) -> dict[Shape, list[str]]:
    """Shape -> hostnames, without a cache kept between calls."""
    return ShapeCache().group(inventories, bandwidth_gbs_by_host)
