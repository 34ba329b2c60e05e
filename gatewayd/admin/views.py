"""Admin replies built from the controller's state."""

from __future__ import annotations

from datetime import datetime

from gatewayd.controller import replica as rs
from gatewayd.controller.replica import Replica
from gatewayd.gateway.routing.engine_access import EngineAccess
from gatewayd.store import ModelRecord
from llmgw.catalog import Model
from llmgw.modelplan.types import Layout as PlanLayout
from llmgw.modelplan.types import Plan
from llmgw.present.modelfmt import to_spec
from proto.llmgw.v1 import (
    FetchProgress,
    Layout,
    ModelSpec,
    ModelView,
    PlanReply,
    ReplicaEvent,
    ReplicaView,
)


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


def model_spec(model: Model) -> ModelSpec:
    return to_spec(model)


def model_view(
    model: Model,
    rec: ModelRecord | None,
    replicas: list[Replica],
    *,
    desired: int | None = None,
    scale_reason: str = "",
) -> ModelView:
    """The model as ``ctl models`` shows it; ``desired`` is the scaler's count (None: min)."""
    active = [r for r in replicas if r.state in rs.ACTIVE and r.state != rs.DRAINING]
    ready = [r for r in active if r.state == rs.READY]
    desired = model.replicas_min if desired is None else desired
    if model.external is not None:
        keys = len(model.external.api_key_files)
        state = "serving"
        reason = f"answered by {model.external.url}" + (
            f" with {keys} {'key' if keys == 1 else 'keys'}" if keys else ""
        )
    elif desired == 0 and model.replicas_max > 0:
        state, reason = "on demand", "no replica now; the first request starts one"
    elif desired == 0:
        state, reason = "stopped", "scaled to 0"
    elif len(ready) >= desired:
        state, reason = "serving", f"{len(ready)} of {desired} ready"
    elif any(r.state == rs.PENDING for r in replicas):
        pending = next(r for r in replicas if r.state == rs.PENDING)
        state, reason = "unplaceable", pending.reason
    else:
        waiting = next((r for r in replicas if r.state not in (rs.READY, rs.STOPPED)), None)
        state = "starting"
        reason = f"{len(ready)} of {desired} ready" + (
            f"; {waiting.replica_id}: {waiting.state} ({waiting.reason})" if waiting else ""
        )
    if scale_reason and model.replicas_min != model.replicas_max:
        reason += f" ({scale_reason})"
    return ModelView(
        spec=model_spec(model),
        replicas_desired=desired,
        replicas_ready=len(ready),
        state=state,
        reason=reason,
        created_at=_iso(rec.created_at if rec else None),
        updated_at=_iso(rec.updated_at if rec else None),
    )


def replica_view(r: Replica, node_address: str = "") -> ReplicaView:
    endpoint = ""
    if r.state == rs.READY and r.port:
        # Its engine door: plain HTTP on this machine, TLS from any other.
        host = node_address or "127.0.0.1"
        url_host = f"[{host}]" if ":" in host else host
        endpoint = f"{EngineAccess.scheme(host)}://{url_host}:{r.port}"
    return ReplicaView(
        replica_id=r.replica_id,
        model=r.model,
        profile=r.profile,
        node_id=r.node_id,
        gpu_indexes=list(r.gpu_indexes),
        state=r.state,
        reason=r.reason,
        since=_iso(r.since),
        deadline=_iso(r.deadline),
        port=r.port,
        pid=r.pid,
        restarts=r.restarts,
        endpoint=endpoint,
        fetch=FetchProgress(bytes_done=r.fetch_done_bytes, bytes_total=r.fetch_total_bytes)
        if r.fetch_total_bytes
        else None,
        history=[ReplicaEvent(at=_iso(e.at), state=e.state, reason=e.reason) for e in r.history],
        cores=r.cores,
        host_memory_bytes=r.host_memory_bytes,
    )


def layout_message(layout: PlanLayout) -> Layout:
    return Layout.from_dict(layout.model_dump(mode="json"))


def plan_reply(plan: Plan) -> PlanReply:
    return PlanReply.from_dict(plan.model_dump(mode="json"))
