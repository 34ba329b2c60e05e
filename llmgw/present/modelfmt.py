"""How models, replicas, plans and placements read to people, in ``llmgw ctl`` and the console.

``llmgw ctl models`` and the console's Models screen build their rows from
``model_cells``; ``llmgw ctl replicas`` and the Replicas screen from
``replica_cells``; ``llmgw ctl model plan`` and the serve dialog from
``layout_cells``; ``llmgw ctl explain-placement`` and the explain dialog from
``placement_summary``. So a command and its screen can never disagree about
what a state, a size or a reason looks like.

``serve_spec`` builds the spec ``llmgw ctl model serve`` and the serve dialog
send, from the same few options, with the same checks.
"""

from __future__ import annotations

import re

from pydantic import ValidationError
from rich.text import Text

from llmgw.catalog import GpuNeed, Model, ModelSource, Profile
from llmgw.catalog.price import spec_to_wire
from llmgw.errors import UsageError
from proto.llmgw.v1 import (
    Layout,
    ModelSpec,
    ModelView,
    PlacementReply,
    PlanReply,
    RemoveModelReply,
    ReplicaEvent,
    ReplicaView,
)

MODEL_COLUMNS = ("MODEL", "STATE", "READY", "ENGINE", "SOURCE", "REASON")
REPLICA_COLUMNS = ("REPLICA", "MODEL", "NODE", "WHERE", "STATE", "SINCE", "RESTARTS", "REASON")
HISTORY_COLUMNS = ("AT", "STATE", "REASON")
PLAN_COLUMNS = ("LAYOUT", "PER CARD", "WEIGHTS", "KV", "OVERHEAD", "HOST", "TOK/S", "NOTES")
REASON_COLUMNS = ("NODE", "WHY NOT")
# What an empty catalog and an empty replica list say, in the command and the console alike.
NO_MODELS = "No models yet. Serve one: llmgw ctl model serve SOURCE"
NO_REPLICAS = "No replicas."

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


def state_text(state: str) -> Text:
    """A model, replica or engine state, coloured by what it means."""
    return Text(state, style=STATE_STYLE.get(state, ""))


# -- models ---------------------------------------------------------------------


def model_engine(m: ModelView) -> str:
    return m.spec.profiles[0].engine if m.spec and m.spec.profiles else ""


def model_cells(m: ModelView) -> tuple[str | Text, ...]:
    """One model's cells, in the order of ``MODEL_COLUMNS``."""
    return (
        m.spec.name if m.spec else "",
        state_text(m.state),
        replicas_cell(m),
        model_engine(m),
        m.spec.source if m.spec else "",
        m.reason,
    )


def model_facts(m: ModelView) -> str:
    """What ``ctl model show`` says below the row: bounds, class, fallbacks."""
    spec = m.spec
    if spec is None:
        return ""
    lines = []
    if spec.replicas_min != spec.replicas_max:
        how = "started on demand; " if spec.replicas_min == 0 else ""
        lines.append(
            f"replicas: {spec.replicas_min} to {spec.replicas_max} ({how}the load decides)"
        )
    lines.append(f"class: {spec.priority_class or 'normal'}")
    for profile in spec.profiles:
        if profile.cores:
            lines.append(f"cores: {profile.cores} per CPU replica ({profile.name})")
    if spec.fallbacks:
        lines.append(f"fallbacks: {', '.join(spec.fallbacks)} (in order)")
    return "\n".join(lines)


def replicas_cell(m: ModelView) -> str:
    """Ready of desired, and the bounds where the load decides between them: ``1/2 (1..4)``."""
    cell = f"{m.replicas_ready}/{m.replicas_desired}"
    if m.spec and m.spec.replicas_min != m.spec.replicas_max:
        cell += f" ({m.spec.replicas_min}..{m.spec.replicas_max})"
    return cell


def removed_text(r: RemoveModelReply) -> str:
    return f"Removed {r.name}; {r.replicas_stopping} replicas stopping."


# -- replicas -------------------------------------------------------------------

# Replica states that hold what they were given on their node (or are about to).
HOLDING = ("placed", "fetching", "installing", "starting", "ready", "draining")


def replica_where(r: ReplicaView) -> str:
    """Which GPUs of its node the replica has, or CPU; "-" before it is placed."""
    if r.gpu_indexes:
        return f"GPU {','.join(map(str, r.gpu_indexes))}"
    if r.node_id and r.cores:
        return f"CPU ×{r.cores}"
    return "CPU" if r.node_id else "-"


def replica_reason(r: ReplicaView) -> str:
    """The reason with the download's progress and, once ready, the endpoint."""
    reason = r.reason
    if r.fetch and r.fetch.bytes_total:
        reason += f" ({gib(r.fetch.bytes_done)} of {gib(r.fetch.bytes_total)})"
    if r.endpoint:
        reason += f" · {r.endpoint}"
    return reason


def clock(iso: str) -> str:
    """The time of day of an ISO timestamp ("2025-01-02T13:04:05+00:00" -> "13:04:05")."""
    return iso[11:19]


def replica_cells(r: ReplicaView) -> tuple[str | Text, ...]:
    """One replica's cells, in the order of ``REPLICA_COLUMNS``."""
    return (
        r.replica_id,
        r.model,
        r.node_id or "-",
        replica_where(r),
        state_text(r.state),
        clock(r.since),
        str(r.restarts),
        replica_reason(r),
    )


def replica_facts(r: ReplicaView) -> list[tuple[str, str | Text]]:
    """A replica's details as (label, value) pairs."""
    return [
        ("replica", r.replica_id),
        ("model", f"{r.model} (profile {r.profile or 'default'})"),
        ("node", r.node_id or "-"),
        ("where", replica_where(r)),
        ("state", state_text(r.state)),
        ("reason", replica_reason(r)),
        ("since", r.since),
        ("deadline", r.deadline or "-"),
        ("restarts", str(r.restarts)),
        ("pid / port", f"{r.pid or '-'} / {r.port or '-'}"),
    ]


def history_cells(e: ReplicaEvent) -> tuple[str | Text, ...]:
    """One step of a replica's history, in the order of ``HISTORY_COLUMNS``."""
    return (e.at, state_text(e.state), e.reason)


# -- planning and placement -----------------------------------------------------


def plan_head(p: PlanReply) -> Text:
    """What the model is and what its context costs, in one line."""
    f = p.facts
    if f is None:
        return Text(f"context {p.context}")
    return Text(
        f"{f.architecture or 'model'} · {f.layers} layers · {f.quantisation or f.format} · "
        f"weights {gib(f.weights_bytes)} · context {p.context} "
        f"(trained {f.trained_context}) · KV {p.kv_bytes_per_token} bytes/token"
    )


def layout_kind(lay: Layout) -> str:
    if lay.kind == "cpu":
        return "CPU"
    return (
        f"{lay.gpus} GPU"
        + (f" TP{lay.tensor_parallel}" if lay.tensor_parallel > 1 else "")
        + (" EP" if lay.expert_parallel else "")
    )


def layout_cells(lay: Layout) -> tuple[str, ...]:
    """One layout's cells, in the order of ``PLAN_COLUMNS``."""
    pc = lay.per_card
    total = (pc.weights_bytes + pc.kv_bytes + pc.overhead_bytes) if pc else 0
    return (
        layout_kind(lay),
        gib(total),
        gib(pc.weights_bytes if pc else 0),
        gib(pc.kv_bytes if pc else 0),
        gib(pc.overhead_bytes if pc else 0),
        gib(lay.host_memory_bytes),
        f"{lay.tokens_per_s:.0f}",
        "; ".join(lay.notes),
    )


def placement_summary(r: PlacementReply) -> Text:
    """Where the model goes, or why it goes nowhere, in one line."""
    if r.placement:
        p = r.placement
        where = f"GPUs {list(p.gpu_indexes)}" if p.gpu_indexes else "CPU"
        return Text(f"{r.model} → node {p.node_id}, {where}", style="green")
    return Text(f"{r.model} cannot be placed: {r.refused}", style="red")


# -- serving --------------------------------------------------------------------


def name_from_source(source: str) -> str:
    """A catalog name from a file name: "gemma-3-270m.Q4_K_M.gguf" -> "gemma-3-270m.q4-k-m"."""
    stem = ModelSource.parse(source).file_name
    stem = re.sub(r"\.(gguf|safetensors|bin)$", "", stem, flags=re.IGNORECASE)
    name = re.sub(r"[^a-z0-9.-]+", "-", stem.lower()).strip("-.")
    return name[:128] or "model"


def validation_text(e: ValidationError | ValueError) -> str:
    """A pydantic error as one line an operator can act on: "field: what is wrong; …"."""
    if not isinstance(e, ValidationError):
        return str(e)
    parts = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


def serve_spec(
    source: str,
    *,
    name: str = "",
    engine: str = "llama.cpp",
    replicas: int = 1,
    context: int = 0,
    gpus: int = 0,
    cpu: bool = False,
    sha256: str = "",
    priority_class: str = "",
    fallbacks: tuple[str, ...] | list[str] = (),
    cores: int = 0,
) -> ModelSpec:
    """The spec ``llmgw ctl model serve`` sends: one profile, ``replicas`` replicas.

    Raises ``UsageError`` saying what is wrong with the options.
    """
    try:
        profile = Profile(
            engine=engine, cpu=cpu, gpu=GpuNeed(count=gpus) if gpus else None, cores=cores
        )
        model = Model(
            name=name or name_from_source(source),
            source=source,
            sha256=sha256,
            profiles=[profile],
            replicas_min=replicas,
            replicas_max=replicas,
            context_length=context,
            priority_class=priority_class,
            fallbacks=list(fallbacks),
        )
    except (ValidationError, ValueError) as e:
        raise UsageError(validation_text(e)) from e
    return to_spec(model)


def to_spec(model: Model) -> ModelSpec:
    """A catalog model as the admin API's ModelSpec."""
    return ModelSpec.from_dict(spec_to_wire(model.model_dump(mode="json")))
