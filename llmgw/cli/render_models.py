"""How model, replica, plan and placement replies look to people."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmgw.output import renders
from proto.llmgw.v1 import (
    ListEnginesReply,
    ListModelsReply,
    ListReplicasReply,
    ModelView,
    PlacementReply,
    PlanReply,
    RemoveModelReply,
    ReplicaLogsReply,
)

STATE_STYLE = {
    "ready": "green",
    "serving": "green",
    "failed": "red",
    "unplaceable": "red",
    "pending": "yellow",
    "starting": "yellow",
    "draining": "yellow",
}


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "-"


def _state(s: str) -> Text:
    return Text(s, style=STATE_STYLE.get(s, ""))


@renders(ListModelsReply)
def _models(reply: ListModelsReply):
    if not reply.models:
        return Text("No models yet. Serve one: llmgw ctl model serve SOURCE")
    t = Table(title=f"Models ({len(reply.models)})", title_justify="left")
    for col in ("MODEL", "STATE", "READY", "ENGINE", "SOURCE", "REASON"):
        t.add_column(col)
    for m in reply.models:
        engine = m.spec.profiles[0].engine if m.spec.profiles else ""
        t.add_row(
            m.spec.name,
            _state(m.state),
            f"{m.replicas_ready}/{m.replicas_desired}",
            engine,
            m.spec.source,
            m.reason,
        )
    return t


@renders(ModelView)
def _model(m: ModelView):
    return _models(ListModelsReply(models=[m]))


@renders(RemoveModelReply)
def _removed(r: RemoveModelReply):
    return Text(f"Removed {r.name}; {r.replicas_stopping} replicas stopping.")


@renders(ListReplicasReply)
def _replicas(reply: ListReplicasReply):
    if not reply.replicas:
        return Text("No replicas.")
    t = Table(title=f"Replicas ({len(reply.replicas)})", title_justify="left")
    for col in ("REPLICA", "MODEL", "NODE", "WHERE", "STATE", "SINCE", "RESTARTS", "REASON"):
        t.add_column(col)
    for r in reply.replicas:
        where = f"GPU {','.join(map(str, r.gpu_indexes))}" if r.gpu_indexes else "CPU"
        reason = r.reason
        if r.fetch and r.fetch.bytes_total:
            reason += f" ({gib(r.fetch.bytes_done)} of {gib(r.fetch.bytes_total)})"
        if r.endpoint:
            reason += f" · {r.endpoint}"
        t.add_row(
            r.replica_id,
            r.model,
            r.node_id or "-",
            where,
            _state(r.state),
            r.since[11:19],
            str(r.restarts),
            reason,
        )
    return t


@renders(PlanReply)
def _plan(p: PlanReply):
    f = p.facts
    head = Text(
        f"{f.architecture or 'model'} · {f.layers} layers · {f.quantisation or f.format} · "
        f"weights {gib(f.weights_bytes)} · context {p.context} "
        f"(trained {f.trained_context}) · KV {p.kv_bytes_per_token} bytes/token"
    )
    parts = [head]
    if p.refused:
        parts.append(Text(f"refused: {p.refused}", style="red"))
    t = Table(title="Layouts (best first)", title_justify="left")
    for col in ("LAYOUT", "PER CARD", "WEIGHTS", "KV", "OVERHEAD", "HOST", "TOK/S", "NOTES"):
        t.add_column(col)
    for lay in p.layouts:
        pc = lay.per_card
        kind = (
            "CPU"
            if lay.kind == "cpu"
            else (
                f"{lay.gpus} GPU"
                + (f" TP{lay.tensor_parallel}" if lay.tensor_parallel > 1 else "")
                + (" EP" if lay.expert_parallel else "")
            )
        )
        total = (pc.weights_bytes + pc.kv_bytes + pc.overhead_bytes) if pc else 0
        t.add_row(
            kind,
            gib(total),
            gib(pc.weights_bytes if pc else 0),
            gib(pc.kv_bytes if pc else 0),
            gib(pc.overhead_bytes if pc else 0),
            gib(lay.host_memory_bytes),
            f"{lay.tokens_per_s:.0f}",
            "; ".join(lay.notes),
        )
    parts.append(t)
    parts += [Text(n, style="dim") for n in p.notes]
    return Group(*parts)


@renders(PlacementReply)
def _placement(r: PlacementReply):
    parts = []
    if r.placement:
        p = r.placement
        where = f"GPUs {list(p.gpu_indexes)}" if p.gpu_indexes else "CPU"
        parts.append(Text(f"{r.model} → node {p.node_id}, {where}", style="green"))
    else:
        parts.append(Text(f"{r.model} cannot be placed: {r.refused}", style="red"))
    t = Table(title="Every node", title_justify="left")
    t.add_column("NODE")
    t.add_column("WHY NOT")
    for n in r.reasons:
        t.add_row(n.node_id, n.reason)
    if r.reasons:
        parts.append(t)
    return Group(*parts)


@renders(ListEnginesReply)
def _engines(reply: ListEnginesReply):
    if not reply.engines:
        return Text("No engine reported yet.")
    t = Table(title="Engines", title_justify="left")
    for col in ("NODE", "ENGINE", "VERSION", "STATE", "IN THE NODE'S WORDS"):
        t.add_column(col)
    for e in reply.engines:
        t.add_row(
            e.node_id, e.engine, f"{e.version}-{e.variant}".strip("-"), _state(e.state), e.message
        )
    return t


@renders(ReplicaLogsReply)
def _logs(reply: ReplicaLogsReply):
    if not reply.lines:
        return Text(f"{reply.replica_id} has written nothing yet.")
    return Text("\n".join(reply.lines))
