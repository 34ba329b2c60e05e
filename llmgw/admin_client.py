"""The admin client: the one way the CLI and the console talk to gatewayd.

Every ``llmgw ctl`` command and every console screen call a method here; each
method calls one admin RPC and returns its reply message unchanged, so what a
screen shows and what ``--json`` prints come from the same answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Self

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from llmgw.admin_mcp_calls import McpCalls
from llmgw.config import load_server_config, split_host_port
from llmgw.errors import (
    AdminError,
    AdminUnauthenticated,
    AdminUnreachable,
    ConfigError,
    ConflictError,
    NotFoundError,
    UsageError,
)
from llmgw.grpcsize import ADMIN_MAX_MESSAGE_BYTES, capped_codec
from llmgw.keepalive import keepalive_config
from llmgw.paths import Paths
from proto.llmgw.v1 import (
    AdminServiceStub,
    BatchView,
    CordonNodeRequest,
    CreateKeyRequest,
    GetBatchRequest,
    GetModelRequest,
    GetNodeRequest,
    GetSettingsRequest,
    KeyView,
    LabelNodeRequest,
    LimitsView,
    ListBatchesReply,
    ListBatchesRequest,
    ListEnginesReply,
    ListEnginesRequest,
    ListKeysReply,
    ListKeysRequest,
    ListMirrorsReply,
    ListMirrorsRequest,
    ListModelsReply,
    ListModelsRequest,
    ListNodesReply,
    ListNodesRequest,
    ListReplicasReply,
    ListReplicasRequest,
    ListTenantsReply,
    ListTenantsRequest,
    ListWeightsReply,
    ListWeightsRequest,
    MirrorAddRequest,
    MirrorDuReply,
    MirrorDuRequest,
    MirrorPeerRequest,
    MirrorPeersReply,
    MirrorPeersRequest,
    MirrorProgress,
    MirrorRemoveReply,
    MirrorRemoveRequest,
    MirrorRepoRequest,
    MirrorRepoView,
    ModelSpec,
    ModelView,
    NodeView,
    PlacementReply,
    PlanModelRequest,
    PlanReply,
    PutModelRequest,
    RemoveModelReply,
    RemoveNodeReply,
    RemoveNodeRequest,
    RemoveTenantReply,
    RemoveWeightsReply,
    RemoveWeightsRequest,
    RenameTenantRequest,
    ReplicaLogsReply,
    ReplicaLogsRequest,
    RestartReplicaReply,
    RestartReplicaRequest,
    RevokeKeyRequest,
    RevokeNodeReply,
    RevokeNodeRequest,
    RollbackSettingsRequest,
    RotateEngineKeysReply,
    RotateEngineKeysRequest,
    RotateKeyRequest,
    ScaleModelRequest,
    SetLimitsRequest,
    SetModelContextRequest,
    SetModelResourcesRequest,
    SetRetentionRequest,
    SetSettingsRequest,
    SettingsDiffReply,
    SettingsDiffRequest,
    SettingsHistoryReply,
    SettingsHistoryRequest,
    SettingsReply,
    SettingsWritten,
    StatusReply,
    StatusRequest,
    TenantRequest,
    TenantView,
    UsageReply,
    UsageRequest,
    UsageRowView,
    WarningsReply,
    WarningsRequest,
    WatchEvent,
    WatchRequest,
)

DEFAULT_TIMEOUT_S = 10.0


class AdminClient(McpCalls):
    """A connection to gatewayd's admin API on 127.0.0.1, authenticated by token."""

    def __init__(self, address: str, token: str, *, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.address = address
        host, port = split_host_port(address)
        # Keepalive so a Watch on a vanished control plane ends instead of hanging.
        self._channel = Channel(
            host, port, config=keepalive_config(), codec=capped_codec(ADMIN_MAX_MESSAGE_BYTES)
        )
        self._stub = AdminServiceStub(self._channel, metadata={"authorization": f"Bearer {token}"})
        self._timeout_s = timeout_s

    @classmethod
    def from_paths(cls, paths: Paths, **kw) -> AdminClient:
        """The admin address from server.yaml and the token from the secrets dir."""
        cfg = load_server_config(paths.server_yaml)
        try:
            token = paths.admin_token_file.read_text().strip()
        except FileNotFoundError as e:
            raise ConfigError(
                f"the admin token {paths.admin_token_file} does not exist",
                hint="create it with: llmgw server init",
            ) from e
        except PermissionError as e:
            raise ConfigError(
                f"the admin token {paths.admin_token_file} cannot be read",
                hint="run as the user that owns it (sudo for a system install)",
            ) from e
        return cls(cfg.listen.admin, token, **kw)

    def close(self) -> None:
        self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    async def _call(self, coro):
        try:
            return await coro
        except GRPCError as e:
            raise self._map(e) from e
        except (ConnectionError, OSError, StreamTerminatedError, TimeoutError) as e:
            raise AdminUnreachable(
                f"gatewayd does not answer on {self.address}",
                hint="start it (llmgw server, or llmgw up) and check listen.admin in server.yaml",
            ) from e

    def _map(self, e: GRPCError) -> Exception:
        if e.status is Status.UNAUTHENTICATED:
            return AdminUnauthenticated(
                "the admin token was refused",
                hint="use the token of this control plane (secrets/admin-token), "
                "or run as the user that owns it",
            )
        if e.status is Status.NOT_FOUND:
            return NotFoundError(e.message or "not found")
        if e.status in (Status.INVALID_ARGUMENT, Status.FAILED_PRECONDITION):
            return UsageError(e.message or "refused")
        if e.status is Status.RESOURCE_EXHAUSTED:
            # A mirror's quota: the message says what to remove.
            return UsageError(e.message or "no room left")
        if e.status is Status.ALREADY_EXISTS:
            return ConflictError(e.message or "already exists")
        if e.status is Status.UNAVAILABLE:
            return AdminUnreachable(e.message or f"gatewayd at {self.address} is unavailable")
        return AdminError(f"gatewayd answered {e.status.name}: {e.message}")

    async def status(self) -> StatusReply:
        return await self._call(self._stub.status(StatusRequest(), timeout=self._timeout_s))

    async def list_nodes(self) -> ListNodesReply:
        return await self._call(self._stub.list_nodes(ListNodesRequest(), timeout=self._timeout_s))

    async def get_node(self, node_id: str) -> NodeView:
        return await self._call(
            self._stub.get_node(GetNodeRequest(node_id=node_id), timeout=self._timeout_s)
        )

    async def cordon_node(self, node_id: str) -> NodeView:
        return await self._call(
            self._stub.cordon_node(CordonNodeRequest(node_id=node_id), timeout=self._timeout_s)
        )

    async def uncordon_node(self, node_id: str) -> NodeView:
        return await self._call(
            self._stub.uncordon_node(CordonNodeRequest(node_id=node_id), timeout=self._timeout_s)
        )

    async def drain_node(self, node_id: str) -> NodeView:
        return await self._call(
            self._stub.drain_node(CordonNodeRequest(node_id=node_id), timeout=self._timeout_s)
        )

    async def label_node(
        self, node_id: str, set_: dict[str, str] | None = None, remove: list[str] | None = None
    ) -> NodeView:
        """Set and remove operator labels; the node's agent.yaml labels stay under them."""
        request = LabelNodeRequest(node_id=node_id, set=dict(set_ or {}), remove=list(remove or []))
        return await self._call(self._stub.label_node(request, timeout=self._timeout_s))

    async def list_models(self) -> ListModelsReply:
        return await self._call(
            self._stub.list_models(ListModelsRequest(), timeout=self._timeout_s)
        )

    async def get_model(self, name: str) -> ModelView:
        return await self._call(
            self._stub.get_model(GetModelRequest(name=name), timeout=self._timeout_s)
        )

    async def put_model(self, spec: ModelSpec, *, create_only: bool = False) -> ModelView:
        request = PutModelRequest(spec=spec, create_only=create_only)
        return await self._call(self._stub.put_model(request, timeout=self._timeout_s))

    async def scale_model(
        self, name: str, replicas: int = 0, *, low: int | None = None, high: int | None = None
    ) -> ModelView:
        """Both bounds to ``replicas``, or min (``low``) and max (``high``) as given."""
        request = ScaleModelRequest(name=name, replicas=replicas, min=low, max=high)
        return await self._call(self._stub.scale_model(request, timeout=self._timeout_s))

    async def remove_model(self, name: str) -> RemoveModelReply:
        return await self._call(
            self._stub.remove_model(GetModelRequest(name=name), timeout=self._timeout_s)
        )

    async def set_model_context(self, name: str, context: int, slots: int = 0) -> ModelView:
        request = SetModelContextRequest(name=name, context_length=context, slots=slots)
        return await self._call(self._stub.set_model_context(request, timeout=self._timeout_s))

    async def set_model_resources(
        self, name: str, *, cores: int | None = None, profile: str = ""
    ) -> ModelView:
        """Set what the model's CPU replicas reserve (None leaves it as it is)."""
        request = SetModelResourcesRequest(name=name, profile=profile, cores=cores)
        return await self._call(self._stub.set_model_resources(request, timeout=self._timeout_s))

    async def plan_model(self, request: PlanModelRequest) -> PlanReply:
        return await self._call(self._stub.plan_model(request, timeout=self._timeout_s))

    async def explain_placement(self, name: str) -> PlacementReply:
        return await self._call(
            self._stub.explain_placement(GetModelRequest(name=name), timeout=self._timeout_s)
        )

    async def list_replicas(self, model: str = "") -> ListReplicasReply:
        return await self._call(
            self._stub.list_replicas(ListReplicasRequest(model=model), timeout=self._timeout_s)
        )

    async def replica_logs(self, replica_id: str, lines: int = 100) -> ReplicaLogsReply:
        request = ReplicaLogsRequest(replica_id=replica_id, lines=lines)
        return await self._call(self._stub.replica_logs(request, timeout=self._timeout_s + 5))

    async def rotate_engine_keys(self) -> RotateEngineKeysReply:
        """Every replica's key replaced (the old refused a few seconds later)."""
        return await self._call(
            self._stub.rotate_engine_keys(RotateEngineKeysRequest(), timeout=self._timeout_s + 30)
        )

    async def list_engines(self) -> ListEnginesReply:
        return await self._call(
            self._stub.list_engines(ListEnginesRequest(), timeout=self._timeout_s)
        )

    async def create_key(
        self,
        project: str,
        *,
        name: str = "",
        models: list[str] = (),
        expires_in_s: int = 0,
        rpm: int = 0,
        tpm: int = 0,
        budget_month_micros: int | None = None,
        band: str = "",
    ) -> KeyView:
        request = CreateKeyRequest(
            project=project,
            name=name,
            models=list(models),
            expires_in_s=expires_in_s,
            rpm=rpm,
            tpm=tpm,
            budget_month_micros=budget_month_micros,
            band=band,
        )
        return await self._call(self._stub.create_key(request, timeout=self._timeout_s))

    async def list_keys(self, project: str = "") -> ListKeysReply:
        return await self._call(
            self._stub.list_keys(ListKeysRequest(project=project), timeout=self._timeout_s)
        )

    async def revoke_key(self, key_id: str) -> KeyView:
        return await self._call(
            self._stub.revoke_key(RevokeKeyRequest(key_id=key_id), timeout=self._timeout_s)
        )

    async def rotate_key(self, key_id: str, overlap_s: int = 0) -> KeyView:
        """A new secret for the key; the old one works ``overlap_s`` more seconds."""
        request = RotateKeyRequest(key_id=key_id, overlap_s=overlap_s)
        return await self._call(self._stub.rotate_key(request, timeout=self._timeout_s))

    async def set_limits(
        self, limits: LimitsView, *, clear: list[str] = (), replace: bool = False
    ) -> LimitsView:
        """Change the limits of a key (``key_…``) or an org, team or project path."""
        request = SetLimitsRequest(limits=limits, clear=list(clear), replace=replace)
        return await self._call(self._stub.set_limits(request, timeout=self._timeout_s))

    async def create_tenant(self, kind: str, path: str, *, parents: bool = False) -> TenantView:
        request = TenantRequest(kind=kind, path=path, parents=parents)
        return await self._call(self._stub.create_tenant(request, timeout=self._timeout_s))

    async def list_tenants(self, kind: str = "", under: str = "") -> ListTenantsReply:
        request = ListTenantsRequest(kind=kind, under=under)
        return await self._call(self._stub.list_tenants(request, timeout=self._timeout_s))

    async def set_retention(self, path: str, retain_responses_s: int) -> TenantView:
        """How long a project keeps stored responses (/v1/responses); 0 turns it off."""
        request = SetRetentionRequest(path=path, retain_responses_s=retain_responses_s)
        return await self._call(self._stub.set_retention(request, timeout=self._timeout_s))

    async def rename_tenant(self, kind: str, path: str, new_name: str) -> TenantView:
        request = RenameTenantRequest(kind=kind, path=path, new_name=new_name)
        return await self._call(self._stub.rename_tenant(request, timeout=self._timeout_s))

    async def remove_tenant(
        self, kind: str, path: str, *, force: bool = False
    ) -> RemoveTenantReply:
        """Remove an empty level; with ``force``, the levels beneath and all they hold too."""
        request = TenantRequest(kind=kind, path=path, force=force)
        return await self._call(self._stub.remove_tenant(request, timeout=self._timeout_s))

    # ---- usage ----------------------------------------------------------------

    async def usage(
        self,
        by: list[str] = (),
        *,
        from_: str = "",
        to: str = "",
        project: str = "",
        key_id: str = "",
    ) -> UsageReply:
        """Sums per group over [from_, to) (ISO, UTC): requests, errors, tokens, cost, times."""
        request = UsageRequest(by=list(by), from_=from_, to=to, project=project, key_id=key_id)
        return await self._call(self._stub.usage(request, timeout=self._timeout_s))

    async def export_usage(
        self, *, from_: str = "", to: str = "", project: str = "", key_id: str = ""
    ) -> AsyncIterator[UsageRowView]:
        """Every request of [from_, to), oldest first, as the server reads them out."""
        request = UsageRequest(from_=from_, to=to, project=project, key_id=key_id)
        try:
            # No overall timeout: a year of rows takes as long as it takes;
            # keepalive ends the stream if gatewayd goes away.
            async for row in self._stub.export_usage(request):
                yield row
        except GRPCError as e:
            raise self._map(e) from e
        except (ConnectionError, OSError, StreamTerminatedError) as e:
            raise AdminUnreachable(
                f"the usage export from {self.address} was cut",
                hint="run it again; nothing partial is kept when --out names a file",
            ) from e

    # ---- batches ----------------------------------------------------------------

    async def list_batches(
        self, *, project: str = "", status: str = "", limit: int = 0
    ) -> ListBatchesReply:
        """Batches, newest first: of one project (or all), in one status (or any); 0: 100."""
        request = ListBatchesRequest(project=project, status=status, limit=limit)
        return await self._call(self._stub.list_batches(request, timeout=self._timeout_s))

    async def get_batch(self, batch_id: str) -> BatchView:
        return await self._call(
            self._stub.get_batch(GetBatchRequest(id=batch_id), timeout=self._timeout_s)
        )

    async def cancel_batch(self, batch_id: str) -> BatchView:
        """Start no more of a batch's requests; those in flight finish, then it is cancelled."""
        return await self._call(
            self._stub.cancel_batch(GetBatchRequest(id=batch_id), timeout=self._timeout_s)
        )

    # ---- the model mirror ----------------------------------------------------------
    # Each call goes to the first of the cluster's mirrors that is up; gatewayd
    # asks it with the admin token and answers with what it said.

    async def list_mirrors(self) -> ListMirrorsReply:
        """Each mirror with its state, then what the first one up holds and is pulling."""
        return await self._call(
            self._stub.list_mirrors(ListMirrorsRequest(), timeout=self._timeout_s)
        )

    async def show_mirror_repo(self, repo: str, revision: str = "") -> MirrorRepoView:
        request = MirrorRepoRequest(repo=repo, revision=revision)
        return await self._call(self._stub.show_mirror_repo(request, timeout=self._timeout_s))

    async def add_to_mirror(self, request: MirrorAddRequest) -> AsyncIterator[MirrorProgress]:
        """A pull or upload as it goes; the last message carries the revision now held."""
        try:
            # No overall timeout: 100 GB of weights take as long as they take;
            # keepalive ends the stream if gatewayd goes away.
            async for progress in self._stub.add_to_mirror(request):
                yield progress
        except GRPCError as e:
            raise self._map(e) from e
        except (ConnectionError, OSError, StreamTerminatedError) as e:
            raise AdminUnreachable(
                f"following the add on {self.address} was cut",
                hint="the mirror goes on with it: see llmgw ctl mirror list; "
                "the same add again resumes a failed one",
            ) from e

    async def remove_from_mirror(self, repo: str, revision: str = "") -> MirrorRemoveReply:
        request = MirrorRemoveRequest(repo=repo, revision=revision)
        return await self._call(self._stub.remove_from_mirror(request, timeout=self._timeout_s))

    async def mirror_disk_usage(self) -> MirrorDuReply:
        return await self._call(
            self._stub.mirror_disk_usage(MirrorDuRequest(), timeout=self._timeout_s)
        )

    async def list_mirror_peers(self) -> MirrorPeersReply:
        return await self._call(
            self._stub.list_mirror_peers(MirrorPeersRequest(), timeout=self._timeout_s)
        )

    async def add_mirror_peer(self, url: str) -> MirrorPeersReply:
        request = MirrorPeerRequest(url=url)
        return await self._call(self._stub.add_mirror_peer(request, timeout=self._timeout_s))

    async def remove_mirror_peer(self, url: str) -> MirrorPeersReply:
        request = MirrorPeerRequest(url=url)
        return await self._call(self._stub.remove_mirror_peer(request, timeout=self._timeout_s))

    # ---- the cluster's kept settings (llmgw ctl config, the console's Settings) ---------

    async def get_settings(self, key: str = "", *, version: int = 0) -> SettingsReply:
        """The settings document, or one key of it, of version ``version`` (0: the newest)."""
        request = GetSettingsRequest(key=key, version=version)
        return await self._call(self._stub.get_settings(request, timeout=self._timeout_s))

    async def set_settings(
        self,
        assignments: list[str] | None = None,
        *,
        document_yaml: str = "",
        parent_version: int = 0,
        comment: str = "",
        author: str = "",
    ) -> SettingsWritten:
        """Keep a new version: KEY=VALUE changes, or a whole document, made on
        ``parent_version`` (0: the newest); ConflictError when that was replaced since."""
        request = SetSettingsRequest(
            assignments=list(assignments or []),
            document_yaml=document_yaml,
            parent_version=parent_version,
            comment=comment,
            author=author,
        )
        return await self._call(self._stub.set_settings(request, timeout=self._timeout_s))

    async def settings_history(self, limit: int = 0) -> SettingsHistoryReply:
        request = SettingsHistoryRequest(limit=limit)
        return await self._call(self._stub.settings_history(request, timeout=self._timeout_s))

    async def settings_diff(self, from_version: int = 0, to_version: int = 0) -> SettingsDiffReply:
        """What changed from one version to another (0, 0: the newest against the one before)."""
        request = SettingsDiffRequest(from_version=from_version, to_version=to_version)
        return await self._call(self._stub.settings_diff(request, timeout=self._timeout_s))

    async def rollback_settings(
        self, version: int, *, comment: str = "", author: str = ""
    ) -> SettingsWritten:
        """Keep version ``version`` again, as a new version."""
        request = RollbackSettingsRequest(version=version, comment=comment, author=author)
        return await self._call(self._stub.rollback_settings(request, timeout=self._timeout_s))

    # ---- node and replica operations, warnings -----------------------------------

    async def remove_node(self, node_id: str) -> RemoveNodeReply:
        """Forget a node that is drained or whose agent is stopped (refused otherwise)."""
        return await self._call(
            self._stub.remove_node(RemoveNodeRequest(node_id=node_id), timeout=self._timeout_s)
        )

    async def revoke_node(
        self, node_id: str, *, serial: str = "", fingerprint_sha256: str = "", reason: str = ""
    ) -> RevokeNodeReply:
        """Revoke a node's certificate (by serial; empty: the one its stream presents)."""
        request = RevokeNodeRequest(
            node_id=node_id, serial=serial, fingerprint_sha256=fingerprint_sha256, reason=reason
        )
        return await self._call(self._stub.revoke_node(request, timeout=self._timeout_s))

    async def restart_replica(self, replica_id: str) -> RestartReplicaReply:
        """Stop a replica so another takes its place, or try a failed one again now."""
        request = RestartReplicaRequest(replica_id=replica_id)
        # The stop goes to the node and waits for its acknowledgement.
        return await self._call(self._stub.restart_replica(request, timeout=self._timeout_s + 30))

    async def warnings(self, since_s: int = 0) -> WarningsReply:
        """What is wrong now and what went wrong in the last ``since_s`` seconds (0: an hour)."""
        request = WarningsRequest(since_s=since_s)
        return await self._call(self._stub.warnings(request, timeout=self._timeout_s))

    # ---- the nodes' weights caches ---------------------------------------------------

    async def list_weights(self, node_id: str = "") -> ListWeightsReply:
        """What each node's weights cache holds (one node, or all), as each last said."""
        request = ListWeightsRequest(node_id=node_id)
        return await self._call(self._stub.list_weights(request, timeout=self._timeout_s))

    async def remove_weights(
        self, node_id: str, keys: list[str], *, unused: bool = False
    ) -> RemoveWeightsReply:
        """Remove entries of a node's weights cache (and, with ``unused``, every entry no
        replica uses); those a replica uses are kept, saying by which."""
        request = RemoveWeightsRequest(node_id=node_id, keys=keys, unused=unused)
        # The command goes to the node and waits for its answer.
        return await self._call(self._stub.remove_weights(request, timeout=self._timeout_s + 30))

    async def watch(self, topics: list[str], *, opened: bool = False) -> AsyncIterator[WatchEvent]:
        """Live changes of the given topics ("nodes"), until cancelled.

        ``opened``: the first event is an empty one (no topic), sent once the
        watch follows: read the lists after it and no change falls between.
        """
        try:
            async for event in self._stub.watch(WatchRequest(topics=topics, opened=opened)):
                yield event
        except GRPCError as e:
            raise self._map(e) from e
        except (ConnectionError, OSError, StreamTerminatedError) as e:
            raise AdminUnreachable(f"the watch on {self.address} was cut") from e


__all__ = ["AdminClient"]
