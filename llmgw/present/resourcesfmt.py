"""What a model's replicas hold on their nodes, and the cores left there (``ctl model resources``).

One shape for the command and the console's Models screen: built from the
model, its replicas and the nodes as the admin API gives them.
"""

from __future__ import annotations

from pydantic import BaseModel
from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmgw.present.modelfmt import HOLDING, gib
from llmgw.present.output import renders
from proto.llmgw.v1 import ListNodesReply, ListReplicasReply, ModelView


class ProfileCores(BaseModel):
    name: str
    engine: str
    # "cpu", "gpu" or "planned" (GPUs if any fit, else CPU).
    runs: str
    cores: int


class ReplicaHold(BaseModel):
    replica_id: str
    node_id: str
    state: str
    # "CPU" or "GPU 0,1".
    where: str
    cores: int
    host_memory_bytes: int


class NodeCores(BaseModel):
    node_id: str
    cpu_count: int
    cores_taken: int
    cores_free: int


class ModelResources(BaseModel):
    model: str
    profiles: list[ProfileCores]
    replicas: list[ReplicaHold]
    nodes: list[NodeCores]


def model_resources(
    view: ModelView, replicas: ListReplicasReply, nodes: ListNodesReply
) -> ModelResources:
    spec = view.spec
    profiles = [
        ProfileCores(
            name=p.name or "default",
            engine=p.engine,
            runs="cpu" if p.cpu else ("gpu" if p.gpu and p.gpu.count else "planned"),
            cores=p.cores,
        )
        for p in (spec.profiles if spec else [])
    ]
    holds = [
        ReplicaHold(
            replica_id=r.replica_id,
            node_id=r.node_id,
            state=r.state,
            where=f"GPU {','.join(map(str, r.gpu_indexes))}" if r.gpu_indexes else "CPU",
            cores=r.cores,
            host_memory_bytes=r.host_memory_bytes,
        )
        for r in replicas.replicas
        if r.node_id and r.state in HOLDING
    ]
    cores = [
        NodeCores(
            node_id=n.node_id,
            cpu_count=n.host.cpu_count if n.host else 0,
            cores_taken=n.cores_taken,
            cores_free=max(0, (n.host.cpu_count if n.host else 0) - n.cores_taken),
        )
        for n in nodes.nodes
    ]
    return ModelResources(
        model=spec.name if spec else "", profiles=profiles, replicas=holds, nodes=cores
    )


def profile_line(p: ProfileCores) -> str:
    """'default (llama.cpp, CPU): 4 cores per CPU replica' or why none are reserved."""
    runs = {"cpu": "CPU", "gpu": "GPUs", "planned": "GPUs or CPU as planned"}[p.runs]
    if p.runs == "gpu":
        return f"{p.name} ({p.engine}, {runs}): no cores reserved (its threads feed its cards)"
    if not p.cores:
        return (
            f"{p.name} ({p.engine}, {runs}): no cores reserved; its CPU replicas share the "
            "node's cores (set some: --cores N)"
        )
    return f"{p.name} ({p.engine}, {runs}): {p.cores} cores per CPU replica, as engine threads"


REPLICA_COLUMNS = ("REPLICA", "NODE", "STATE", "WHERE", "CORES", "HOST MEMORY")
NODE_COLUMNS = ("NODE", "CPUS", "RESERVED", "FREE")


def replica_cells(r: ReplicaHold) -> tuple[str, ...]:
    return (
        r.replica_id,
        r.node_id,
        r.state,
        r.where,
        str(r.cores) if r.cores else "-",
        gib(r.host_memory_bytes) if r.host_memory_bytes else "-",
    )


def node_cells(n: NodeCores) -> tuple[str, ...]:
    return (n.node_id, str(n.cpu_count or "?"), str(n.cores_taken), str(n.cores_free))


@renders(ModelResources)
def _resources(res: ModelResources):
    parts: list = [Text(f"{res.model}: what its replicas hold", style="bold")]
    parts += [Text(profile_line(p)) for p in res.profiles]
    if res.replicas:
        table = Table(*REPLICA_COLUMNS, box=None, pad_edge=False)
        for r in res.replicas:
            table.add_row(*replica_cells(r))
        parts += [Text(""), table]
    else:
        parts.append(Text("No replica holds anything on a node now.", style="dim"))
    if res.nodes:
        table = Table(*NODE_COLUMNS, box=None, pad_edge=False, title_justify="left")
        for n in res.nodes:
            table.add_row(*node_cells(n))
        parts += [Text(""), Text("CPU cores on the nodes", style="bold"), table]
    return Group(*parts)
