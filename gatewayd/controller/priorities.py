"""Priority classes: a model that cannot be placed takes the cards of a lower class.

Each model names one of the cluster's classes (kept setting ``classes``,
name to priority; "" is "normal"). Models are reconciled highest class first,
so freed cards go to the highest that waits for them. When a replica cannot
be placed, replicas of strictly lower classes are chosen — the lowest class
first, then the youngest — until placement says the replica would fit; those
on the node it would go to are drained (their requests finish, nothing new
reaches them: gatewayd/controller/drain.py) and, once stopped, give their
cards over. The waiting replica says what it waits for, and is tried at every
pass until it is placed. The lower model's own replica then waits for room
in its turn, with its reason.

A change that replaces a replica (a rolling restart, a new context) on a
cluster with no room for old and new side by side drains the old one first
and places the new one in its room, saying so, instead of staying pending.

A mixin of the Reconciler (gatewayd/controller/reconciler.py).
"""

from __future__ import annotations

from gatewayd.controller import replica as rs
from gatewayd.controller.replica import Replica
from llmgw.catalog import Model
from llmgw.scaling import DEFAULT_CLASSES, NORMAL


class Priorities:
    """Preemption by class; the Reconciler provides replicas, the catalog, decide and _stop."""

    classes: dict[str, int] = DEFAULT_CLASSES

    def priority(self, model: Model | None) -> int:
        name = (model.priority_class if model is not None else "") or NORMAL
        return self.classes.get(name, self.classes.get(NORMAL, 0))

    def _class_text(self, model: Model | None) -> str:
        name = (model.priority_class if model is not None else "") or NORMAL
        return f"{name} ({self.priority(model)})"

    async def _make_room(self, model: Model, r: Replica) -> bool:
        """Drain lower-class replicas so that ``r`` can be placed; whether it now waits on any."""
        waiting_on = [
            x.replica_id
            for x in self.replicas.values()
            if x.given_to == r.replica_id and x.state == rs.DRAINING
        ]
        if waiting_on:
            r.move(rs.PENDING, _waiting(waiting_on, self.replicas[waiting_on[0]].node_id))
            r.retry_at = None
            return True
        mine = self.priority(model)
        lower = []
        for x in self.replicas.values():
            if x.state not in rs.ACTIVE or x.state == rs.DRAINING or x.model == model.name:
                continue
            theirs = self._catalog.get(x.model)
            if theirs is not None and self.priority(theirs) < mine:
                lower.append((self.priority(theirs), -x.since.timestamp(), x))
        lower.sort(key=lambda t: (t[0], t[1]))
        exclude: set[str] = set()
        for _p, _age, x in lower:
            exclude.add(x.replica_id)
            decision = self.decide(model, exclude=exclude, explain=False)
            if decision.placement is None:
                continue
            node = decision.placement.node_id
            on_node = {i for i in exclude if self.replicas[i].node_id == node}
            if self.decide(model, exclude=on_node, explain=False).placement is None:
                on_node = exclude  # the node's own are not enough on their own
            for rid in sorted(on_node):
                victim = self.replicas[rid]
                victim.given_to = r.replica_id
                await self._stop(
                    victim,
                    f"given over to {model.name} (class {self._class_text(model)} over "
                    f"{self._class_text(self._catalog.get(victim.model))}): its cards are needed",
                )
            r.move(rs.PENDING, _waiting(sorted(on_node), node))
            r.retry_at = None
            return True
        return False

    async def _replace_in_place(self, model: Model, old: Replica, new: Replica) -> bool:
        """No room for ``new`` beside ``old``: drain ``old`` if ``new`` fits in its room."""
        if new.state != rs.PENDING or new.retry_at is None:
            return False
        if self.decide(model, exclude={old.replica_id}, explain=False).placement is None:
            return False
        old.given_to = new.replica_id
        await self._stop(
            old,
            f"replaced in place by {new.replica_id} (the model changed): "
            "the cluster has no room for both",
        )
        new.move(rs.PENDING, _waiting([old.replica_id], old.node_id))
        new.retry_at = None
        await self._save(new)
        return True


def _waiting(replica_ids: list[str], node: str) -> str:
    return f"waiting for room on node {node}: {', '.join(replica_ids)} drained to make it"
