"""What the reconciler tells agents and how it tells a replica's spec apart: pure builders.

``start_message`` turns a placed replica and its layout into the StartShard an
agent runs; ``spec_hash`` is what a running replica depends on, so a change in
it rolls the replica.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from gatewayd.controller.replica import Replica
from llmgw.catalog import Model
from llmgw.modelplan.types import Layout
from proto.llmgw.v1 import ControlMessage, StartShard, WeightsSource


def pipeline_stages(gpus: int, tensor_parallel: int) -> int:
    """The pipeline stages of a layout on ``gpus`` cards at ``tensor_parallel`` (1: none)."""
    tp = max(1, tensor_parallel)
    return gpus // tp if gpus > tp else 1


def spec_hash(model: Model) -> str:
    """What a running replica depends on; scaling and labels are not in it."""
    keep = model.model_dump(
        mode="json",
        include={"source", "sha256", "profiles", "context_length", "slots", "allow_pickle"},
    )
    # An hf: model added again at a new pin is other weights. Only when set,
    # so replicas of other sources started before keep their hash.
    if model.commit:
        keep["commit"] = model.commit
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def start_message(
    model: Model,
    r: Replica,
    layout: Layout,
    engine_version: str,
    engine_key: str,
    *,
    mirror_urls: Sequence[str] = (),
    mirror_token: str = "",
) -> ControlMessage:
    """The StartShard of replica ``r``, placed with ``layout``.

    ``mirror_urls``: the cluster's mirrors, the up ones first, for an hf:
    source (the node tries them in order, and the hub only when the model's
    allow_internet lets it); ``mirror_token`` is the read token they take.
    """
    profile = model.profiles[0]
    # At the commit pinned when the model was added: a moved branch changes nothing.
    src = model.fetch_source
    mirrors = list(mirror_urls) if src.kind == "hf" else []
    return ControlMessage(
        start_shard=StartShard(
            shard_id=r.shard_id,
            replica_id=r.replica_id,
            model=model.name,
            engine=profile.engine,
            engine_version=engine_version,
            gpu_indexes=r.gpu_indexes,
            args=list(profile.args),
            weights=WeightsSource(
                source=str(src),
                sha256=model.sha256,
                allow_pickle=model.allow_pickle,
                mirror_urls=mirrors,
                mirror_token=mirror_token if mirrors else "",
                allow_internet=model.allow_internet,
            ),
            context_length=r.context,
            slots=model.slots,
            tensor_parallel=r.tensor_parallel,
            pipeline_parallel=pipeline_stages(layout.gpus, layout.tensor_parallel),
            expert_parallel=layout.expert_parallel,
            # The most the plan gives any one of its cards.
            per_gpu_bytes=max(r.per_gpu_bytes.values(), default=0),
            precision=profile.precision,
            env=dict(profile.env),
            engine_key=engine_key,
            startup_timeout_s=profile.startup_timeout_s,
            cpu=r.cpu,
            cores=r.cores,
        )
    )
