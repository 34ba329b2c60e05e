"""Admin RPCs for the catalog, planning, placement, replicas and engines."""

from __future__ import annotations

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.admin.views import layout_message, model_view, plan_reply, replica_view
from gatewayd.catalog.catalog import Catalog, CatalogError
from gatewayd.controller.key_rotation import rotate_engine_keys
from gatewayd.controller.reconciler import Reconciler
from gatewayd.nodes.registry import GONE, NodeRegistry
from llmgw.catalog import Model, Profile
from llmgw.catalog.price import spec_from_wire
from llmgw.engines.builtin_recipes import builtin_files
from llmgw.engines.recipes import BUILT_IN, recipe_view
from llmgw.errors import LlmgwError
from llmgw.present.modelfmt import validation_text
from llmgw.protojson import to_plain
from proto.llmgw.v1 import (
    ControlMessage,
    EngineView,
    FetchShardLogs,
    GetModelRequest,
    ListEnginesReply,
    ListEnginesRequest,
    ListModelsReply,
    ListModelsRequest,
    ListReplicasReply,
    ListReplicasRequest,
    ModelView,
    NodeReason,
    PlacementChoice,
    PlacementReply,
    PlanModelRequest,
    PlanReply,
    PutModelRequest,
    RemoveModelReply,
    ReplicaLogsReply,
    ReplicaLogsRequest,
    RotateEngineKeysReply,
    RotateEngineKeysRequest,
    ScaleModelRequest,
    SetModelContextRequest,
    SetModelResourcesRequest,
)

_STATUS = {
    "invalid": Status.INVALID_ARGUMENT,
    "not_found": Status.NOT_FOUND,
    "exists": Status.ALREADY_EXISTS,
}


def _refuse(e: CatalogError) -> GRPCError:
    return GRPCError(_STATUS.get(e.kind, Status.FAILED_PRECONDITION), e.message)


class ModelAdmin:
    """Mixed into AdminService."""

    _registry: NodeRegistry
    _catalog: Catalog
    _reconciler: Reconciler

    def _model_view(self, name: str) -> ModelView:
        model = self._catalog.get(name)
        if model is None:
            raise GRPCError(Status.NOT_FOUND, f"no model named {name!r}; see: llmgw ctl models")
        replicas = [r for r in self._reconciler.replicas.values() if r.model == name]
        return model_view(
            model,
            self._catalog.record(name),
            replicas,
            desired=self._reconciler.desired(model),
            scale_reason=self._reconciler.scaler.reason(name),
        )

    async def list_models(self, message: ListModelsRequest) -> ListModelsReply:
        return ListModelsReply(models=[self._model_view(n) for n in self._catalog.names()])

    async def get_model(self, message: GetModelRequest) -> ModelView:
        return self._model_view(message.name)

    async def put_model(self, message: PutModelRequest) -> ModelView:
        if message.spec is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "a model spec is needed")
        classes = self._reconciler.classes
        wanted = message.spec.priority_class
        if wanted and wanted not in classes:
            known = ", ".join(f"{n} ({p})" for n, p in sorted(classes.items(), key=lambda c: -c[1]))
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"priority_class {wanted!r} is not one of the cluster's classes: {known}; "
                f"add it with: llmgw ctl config set classes.{wanted} PRIORITY",
            )
        try:
            model = await self._catalog.put(
                spec_from_wire(to_plain(message.spec)), create_only=message.create_only
            )
        except CatalogError as e:
            raise _refuse(e) from None
        self._reconciler.kick()
        return self._model_view(model.name)

    async def scale_model(self, message: ScaleModelRequest) -> ModelView:
        try:
            await self._catalog.scale(
                message.name, message.replicas, low=message.min, high=message.max
            )
        except CatalogError as e:
            raise _refuse(e) from None
        self._reconciler.kick()
        return self._model_view(message.name)

    async def remove_model(self, message: GetModelRequest) -> RemoveModelReply:
        try:
            await self._catalog.remove(message.name)
        except CatalogError as e:
            raise _refuse(e) from None
        stopping = sum(1 for r in self._reconciler.replicas.values() if r.model == message.name)
        self._reconciler.kick()
        return RemoveModelReply(name=message.name, replicas_stopping=stopping)

    def _served_here(self, name: str, why_not: str) -> Model:
        """The catalog's model of that name, refused when missing or answered elsewhere."""
        model = self._catalog.get(name)
        if model is None:
            raise GRPCError(Status.NOT_FOUND, f"no model named {name!r}")
        _refuse_external(model, why_not)
        return model

    async def set_model_context(self, message: SetModelContextRequest) -> ModelView:
        model = self._served_here(message.name, "its context is the provider's")
        trial = model.model_copy(
            update={"context_length": message.context_length, "slots": message.slots or model.slots}
        )
        await self._reconciler.sizing.learn(trial)
        plan = self._reconciler.sizing.plan(
            trial, trial.profiles[0], self._reconciler.inventories()
        )
        if plan.refused:
            raise GRPCError(Status.FAILED_PRECONDITION, plan.refused)
        try:
            await self._catalog.set_context(message.name, message.context_length, message.slots)
        except CatalogError as e:
            raise _refuse(e) from None
        self._reconciler.kick()
        return self._model_view(message.name)

    async def set_model_resources(self, message: SetModelResourcesRequest) -> ModelView:
        self._served_here(message.name, "it runs nothing here")
        if message.cores is not None:
            most = max(
                (
                    (live.host_msg.cpu_count, live.record.node_id)
                    for live in self._registry.live_nodes()
                    if live.host_msg is not None
                    and live.host_msg.cpu_count
                    and live.record.state != GONE
                ),
                default=None,
            )
            if most is not None and message.cores > most[0]:
                raise GRPCError(
                    Status.FAILED_PRECONDITION,
                    f"no node has {message.cores} CPU cores to reserve "
                    f"(the most is {most[0]}, on {most[1]})",
                )
            try:
                await self._catalog.set_cores(message.name, message.cores, message.profile)
            except CatalogError as e:
                raise _refuse(e) from None
            self._reconciler.kick()
        return self._model_view(message.name)

    async def plan_model(self, message: PlanModelRequest) -> PlanReply:
        model = self._catalog.get(message.name) if message.name else None
        try:
            if model is None:
                if not message.source:
                    raise GRPCError(Status.INVALID_ARGUMENT, "give a model name or a source")
                model = Model(
                    name=message.name or "plan",
                    source=message.source,
                    profiles=[
                        Profile(engine=message.engine or "llama.cpp", precision=message.precision)
                    ],
                )
            elif message.precision:
                profile = Profile.model_validate(
                    {**model.profiles[0].model_dump(), "precision": message.precision}
                )
                model = model.model_copy(update={"profiles": [profile, *model.profiles[1:]]})
            update = {}
            if message.context_length:
                update["context_length"] = message.context_length
            if message.slots:
                update["slots"] = message.slots
            model = model.model_copy(update=update)
            _refuse_external(model, "nothing of it runs here to plan")
        except ValueError as e:
            raise GRPCError(Status.INVALID_ARGUMENT, validation_text(e)) from None
        try:
            # A hub repository: its config and shard headers, read now if not yet.
            await self._reconciler.sizing.learn(model, strict=True)
            plan = self._reconciler.sizing.plan(
                model, model.profiles[0], self._reconciler.inventories()
            )
        except LlmgwError as e:
            raise GRPCError(Status.INVALID_ARGUMENT, e.message) from None
        return plan_reply(plan)

    async def explain_placement(self, message: GetModelRequest) -> PlacementReply:
        model = self._catalog.get(message.name)
        if model is None:
            raise GRPCError(Status.NOT_FOUND, f"no model named {message.name!r}")
        _refuse_external(model, "it is not placed on nodes")
        # The model's own replicas count as free: this is its decision, not
        # where one more would go.
        own = {r.replica_id for r in self._reconciler.replicas.values() if r.model == model.name}
        decision = self._reconciler.decide(model, exclude=own)
        choice = None
        if decision.placement is not None:
            p = decision.placement
            choice = PlacementChoice(
                node_id=p.node_id,
                layout=layout_message(p.layout),
                gpu_indexes=list(p.gpu_indexes),
                per_gpu_bytes=dict(p.per_gpu_bytes),
                host_memory_bytes=p.host_memory_bytes,
            )
        reasons = [NodeReason(node_id=n, reason=why) for n, why in sorted(decision.reasons.items())]
        return PlacementReply(
            model=model.name, placement=choice, reasons=reasons, refused=decision.refused
        )

    async def list_replicas(self, message: ListReplicasRequest) -> ListReplicasReply:
        addresses = {n.record.node_id: n.record.address for n in self._registry.live_nodes()}
        replicas = sorted(self._reconciler.replicas.values(), key=lambda r: r.replica_id)
        return ListReplicasReply(
            replicas=[
                replica_view(r, addresses.get(r.node_id, ""))
                for r in replicas
                if not message.model or r.model == message.model
            ]
        )

    async def replica_logs(self, message: ReplicaLogsRequest) -> ReplicaLogsReply:
        r = self._reconciler.replicas.get(message.replica_id)
        if r is None:
            raise GRPCError(
                Status.NOT_FOUND, f"no replica {message.replica_id!r}; see: llmgw ctl replicas"
            )
        if not r.node_id:
            raise GRPCError(
                Status.FAILED_PRECONDITION, f"{r.replica_id} is not placed on a node ({r.reason})"
            )
        ack = await self._registry.command(
            r.node_id,
            ControlMessage(
                fetch_logs=FetchShardLogs(shard_id=r.shard_id, lines=message.lines or 100)
            ),
            timeout_s=10,
        )
        if not ack.ok:
            raise GRPCError(Status.UNAVAILABLE, ack.error)
        return ReplicaLogsReply(replica_id=r.replica_id, lines=list(ack.lines))

    async def rotate_engine_keys(
        self, message: RotateEngineKeysRequest
    ) -> RotateEngineKeysReply:
        return await rotate_engine_keys(self._reconciler)

    async def list_engines(self, message: ListEnginesRequest) -> ListEnginesReply:
        # First the recipes in force (no node): which one, and where it came from.
        out = [
            recipe_view(
                u,
                builtin_files().get((u.release.engine, u.release.version))
                if u.origin == BUILT_IN
                else None,
            )
            for u in self._reconciler.recipes()
        ]
        for live in self._registry.live_nodes():
            for name in sorted(live.engines):
                st = live.engines[name]
                out.append(
                    EngineView(
                        node_id=live.record.node_id,
                        engine=name,
                        version=st.version,
                        variant=st.variant,
                        state=st.state,
                        message=st.message,
                    )
                )
        return ListEnginesReply(engines=out)


def _refuse_external(model: Model, why: str) -> None:
    if model.external is not None:
        raise GRPCError(
            Status.FAILED_PRECONDITION,
            f"{model.name} is answered by an outside provider ({model.external.url}); {why}",
        )
