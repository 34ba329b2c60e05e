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
and places the new one in its room, saying so, instead of staying pending;
so does a replica the operator restarts (``ctl replica restart``).

A mixin of the Reconciler (gatewayd/controller/reconciler.py).
"""

from __future__ import annotations

from gatewayd.controller import replica as rs
from gatewayd.controller.ondemand import starts_on_demand
from gatewayd.controller.replica import Replica, utcnow
from llmgw.catalog import Model
from llmgw.scaling import DEFAULT_CLASSES, NORMAL

# An on-demand model asked for less than this long ago is not idle yet.
IDLE_GRACE_S = 2.0


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
        # The model's own replicas on their way out (restarted by the operator, say) give
        # their room back to it once drained: it waits for them rather than for nothing.
        own = {
            x.replica_id
            for x in self.replicas.values()
            if x.model == model.name and x.state == rs.DRAINING and not x.given_to
        }
        if own:
            decision = self.decide(model, exclude=own, explain=False)
            if decision.placement is not None:
                for rid in own:
                    self.replicas[rid].given_to = r.replica_id
                r.move(rs.PENDING, _waiting(sorted(own), decision.placement.node_id))
                r.retry_at = None
                return True
        mine = self.priority(model)
        on_demand = starts_on_demand(model)
        lower = []
        later = 0  # on-demand holders that may give their cards in a while
        for x in self.replicas.values():
            if x.state not in rs.ACTIVE or x.model == model.name:
                continue
            if x.state == rs.DRAINING:
                later += on_demand  # its cards come free soon, for whoever waits first
                continue
            theirs = self._catalog.get(x.model)
            if theirs is None:
                continue
            p = self.priority(theirs)
            if p < mine:
                lower.append((p, 0, -x.since.timestamp(), x))
            elif on_demand and p == mine and starts_on_demand(theirs):
                # A model started on demand gives its cards to another of its class once
                # it is idle and past its min lifetime: the one idle longest first.
                idle_s = self._idle_s(theirs, x)
                if idle_s is None:
                    later += 1
                else:
                    lower.append((p, 1, -idle_s, x))
        lower.sort(key=lambda t: t[:3])
        exclude: set[str] = set()
        for _p, _kind, _age, x in lower:
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
                theirs = self._catalog.get(victim.model)
                victim.given_to = r.replica_id
                if self.priority(theirs) < mine:
                    why = (
                        f"given over to {model.name} (class {self._class_text(model)} over "
                        f"{self._class_text(theirs)}): its cards are needed"
                    )
                else:
                    why = f"given over to {model.name}, asked for now: this on-demand model is idle"
                    # Stopped on demand: it starts again when it is asked for.
                    self.scaler.set(victim.model, 0, f"stopped on demand: {why}")
                    self.on_demand_rule.stopped(victim.model)
                await self._stop(victim, why)
            r.move(rs.PENDING, _waiting(sorted(on_node), node))
            r.retry_at = None
            return True
        if later:
            # Not "cannot be placed": a held request waits for a holder to become idle.
            r.move(
                rs.PENDING,
                f"waiting for room: {later} on-demand replica{'s' if later != 1 else ''} of "
                f"its class hold the cards it needs, busy or started too lately to give them",
            )
            r.retry_at = None
            return True
        return False

    def _idle_s(self, model: Model, x: Replica) -> float | None:
        """How long an on-demand replica has been idle, if it may give its cards now."""
        demand = self.on_demand_rule.demand
        if x.state != rs.READY or demand is None or demand.waiting(model.name):
            return None
        load = self.replica_load([x.replica_id])
        if load is not None and (load.busy or load.waiting):
            return None
        if (utcnow() - x.made_at).total_seconds() < self.on_demand.min_lifetime_s:
            return None
        idle = self.on_demand_rule.idle_for(demand.last_asked(model.name))
        # Just asked for: its request may be on its way from the gateway's hold.
        return idle if idle >= IDLE_GRACE_S else None

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
