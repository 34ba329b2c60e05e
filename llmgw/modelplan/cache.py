"""Plans kept per model and per set of node shapes, so a pass plans each model once.

The reconciler decides one replica after another and plans the model at
each decision; over 10,000 nodes grouping the nodes into shapes costs a few
milliseconds and planning a model per shape more. A ``PlanCache`` groups a
list of inventories once (the reconciler's pass hands the same list to
every decision), keeps the grouping while the nodes' shapes and names stay
as they were (a pass's new list of the same nodes reuses it), and keeps
each plan for that grouping: a model is planned again only when its facts,
engine, context, slots or precision differ, or the nodes do.

Pure: no I/O. Plans handed out are shared: read them, never change them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from llmgw.inventory import Inventory
from llmgw.modelplan.plan import plan_for_shapes
from llmgw.modelplan.shapes import Shape, ShapeCache
from llmgw.modelplan.types import ModelFacts, Plan

# Plans kept for one grouping; past this the oldest half is dropped (a
# catalog of thousands of models at several contexts each).
PLANS_KEPT = 8192


class _Grouping:
    """Nodes by shape, and the plans made for exactly these nodes."""

    def __init__(self, shapes: dict[Shape, list[str]]) -> None:
        self.shapes = shapes
        # (id of facts, engine, context, slots, precision) -> (facts, plan);
        # the facts are held so their id is not reused meanwhile.
        self.plans: dict[tuple, tuple[ModelFacts, Plan]] = {}


class PlanCache:
    """plan_for_inventories with its groupings and plans remembered (see the module)."""

    def __init__(self) -> None:
        self._shapes = ShapeCache()
        self._grouping: _Grouping | None = None
        # The sequence the grouping was last made from, and its length.
        self._source: Sequence[Inventory] | None = None
        self._source_len = -1
        self.plans_made = 0

    def plan(
        self,
        facts: ModelFacts,
        engine: str,
        context: int = 0,
        slots: int = 1,
        inventories: Iterable[Inventory] = (),
        *,
        precision: str = "",
    ) -> Plan:
        grouping = self._group(inventories)
        key = (id(facts), engine, context, slots, precision)
        kept = grouping.plans.get(key)
        if kept is not None and kept[0] is facts:
            return kept[1]
        plan = plan_for_shapes(facts, engine, context, slots, grouping.shapes, precision=precision)
        self.plans_made += 1
        if len(grouping.plans) >= PLANS_KEPT:
            for old in list(grouping.plans)[: PLANS_KEPT // 2]:
                del grouping.plans[old]
        grouping.plans[key] = (facts, plan)
        return plan

    def _group(self, inventories: Iterable[Inventory]) -> _Grouping:
        if not isinstance(inventories, Sequence):
            inventories = list(inventories)
        # The same list again (a pass's decisions): taken as unchanged.
        if (
            self._grouping is not None
            and inventories is self._source
            and len(inventories) == self._source_len
        ):
            return self._grouping
        shapes = self._shapes.group(inventories)
        if self._grouping is None or shapes != self._grouping.shapes:
            self._grouping = _Grouping(shapes)
        self._source, self._source_len = inventories, len(inventories)
        return self._grouping
