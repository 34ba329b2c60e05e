"""The LabelNode admin RPC: an operator's labels on a node, over the node's own.

A node's labels have two homes. Its agent.yaml's ``labels:`` arrive with
each registration; those an operator sets here are kept in the store, survive
the node's re-registrations and win over the node's own. Removing an
operator's label brings back the agent.yaml value, if the node has one; a
label only agent.yaml gives cannot be removed here (it would come back with
the next registration), so that is refused saying where to change it.

A change is a "nodes" notice: the console redraws the node and the
controller looks again at once, so a model waiting for a label is placed as
soon as a node has it.
"""

from __future__ import annotations

import logging

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.nodes.registry import GONE, NodeRegistry
from llmgw.labels import check_labels, key_problem
from proto.llmgw.v1 import LabelNodeRequest, NodeView

log = logging.getLogger(__name__)


def relabelled(
    own: dict[str, str], operator: dict[str, str], set_: dict[str, str], remove: list[str]
) -> dict[str, str]:
    """The operator's labels after ``set_`` and ``remove``; ValueError when refused."""
    both = sorted(set(set_) & set(remove))
    if both:
        raise ValueError(f"{', '.join(both)} is both set and removed; name each label once")
    check_labels(set_)
    for k in remove:
        problem = key_problem(k)
        if problem:
            raise ValueError(problem)
    only_own = [k for k in remove if k in own and k not in operator]
    if only_own:
        shown = ", ".join(f"{k}={own[k]}" for k in only_own)
        raise ValueError(
            f"{shown} comes from the node's agent.yaml, not from ctl node label: change"
            " labels: in that agent.yaml (the agent picks it up when restarted), or set"
            " another value here, which wins over it"
        )
    out = {k: v for k, v in operator.items() if k not in remove}
    out.update(set_)
    return out


class LabelAdmin:
    _registry: NodeRegistry

    async def label_node(self, message: LabelNodeRequest) -> NodeView:
        node_id = message.node_id
        live = self._registry.live(node_id)
        if live is None or live.record.state == GONE:
            raise GRPCError(Status.NOT_FOUND, f"no node named {node_id!r}; see: llmgw ctl nodes")
        rec = live.record
        try:
            labels = relabelled(
                rec.labels, rec.operator_labels, dict(message.set), list(message.remove)
            )
        except ValueError as e:
            raise GRPCError(Status.INVALID_ARGUMENT, str(e)) from None
        if labels != rec.operator_labels:
            log.info("node %s: operator labels %s -> %s", node_id, rec.operator_labels, labels)
        view = await self._registry.set_labels(node_id, labels)
        return view  # type: ignore[return-value]
