"""How model, replica, plan and placement replies look to people."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmgw.present.modelfmt import (
    MODEL_COLUMNS,
    NO_MODELS,
    NO_REPLICAS,
    PLAN_COLUMNS,
    REASON_COLUMNS,
    REPLICA_COLUMNS,
    layout_cells,
    model_cells,
    model_facts,
    placement_summary,
    plan_head,
    removed_text,
    replica_cells,
    state_text,
)
from llmgw.present.output import renders
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


@renders(ListModelsReply)
def _models(reply: ListModelsReply):
    if not reply.models:
        return Text(NO_MODELS)
    t = Table(title=f"Models ({len(reply.models)})", title_justify="left")
    for col in MODEL_COLUMNS:
        t.add_column(col)
    for m in reply.models:
        t.add_row(*model_cells(m))
    return t


@renders(ModelView)
def _model(m: ModelView):
    table = _models(ListModelsReply(models=[m]))
    facts = model_facts(m)
    return Group(table, Text(facts)) if facts else table


@renders(RemoveModelReply)
def _removed(r: RemoveModelReply):
    return Text(removed_text(r))


@renders(ListReplicasReply)
def _replicas(reply: ListReplicasReply):
    if not reply.replicas:
        return Text(NO_REPLICAS)
    t = Table(title=f"Replicas ({len(reply.replicas)})", title_justify="left")
    for col in REPLICA_COLUMNS:
        t.add_column(col)
    for r in reply.replicas:
        t.add_row(*replica_cells(r))
    return t


@renders(PlanReply)
def _plan(p: PlanReply):
    parts = [plan_head(p)]
    if p.refused:
        parts.append(Text(f"refused: {p.refused}", style="red"))
    t = Table(title="Layouts (best first)", title_justify="left")
    for col in PLAN_COLUMNS:
        t.add_column(col)
    for lay in p.layouts:
        t.add_row(*layout_cells(lay))
    parts.append(t)
    parts += [Text(n, style="dim") for n in p.notes]
    return Group(*parts)


@renders(PlacementReply)
def _placement(r: PlacementReply):
    parts = [placement_summary(r)]
    t = Table(title="Every node", title_justify="left")
    for col in REASON_COLUMNS:
        t.add_column(col)
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
            e.node_id or "(recipe)",  # the control plane's recipe, on no node
            e.engine,
            f"{e.version}-{e.variant}".strip("-"),
            state_text(e.state),
            e.message,
        )
    return t


@renders(ReplicaLogsReply)
def _logs(reply: ReplicaLogsReply):
    if not reply.lines:
        return Text(f"{reply.replica_id} has written nothing yet.")
    return Text("\n".join(reply.lines))
