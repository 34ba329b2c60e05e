"""Admin RPCs for organizations, teams and projects."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.admin.tenancy.keys import limits_view, refuse
from gatewayd.batches.book import BatchBook
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.gateway.policy.tenancy import TenancyRefused, check_path
from gatewayd.store import Store, TenantRecord
from gatewayd.store.response_records import MAX_RETAIN_S
from proto.llmgw.v1 import (
    ListTenantsReply,
    ListTenantsRequest,
    RemoveTenantReply,
    RenameTenantRequest,
    SetRetentionRequest,
    TenantRequest,
    TenantView,
)

if TYPE_CHECKING:
    from gatewayd.mcp.runtime import McpRuntime

# The shortest retention worth keeping a response for (a turn or two of a conversation).
MIN_RETAIN_S = 60


class TenancyAdmin:
    """Mixed into AdminService."""

    _keys: KeyCache
    _store: Store
    _batches: BatchBook | None
    _mcp: McpRuntime | None

    def _tenant_view(self, rec: TenantRecord, retain_s: int = 0) -> TenantView:
        # The keys of the level and those beneath it, by id: a removed level's of the same
        # name are not its own.
        ids = {t.id for t in self._keys.tenancy.list(under=rec.path)}
        keys = sum(1 for r in self._keys.records() if r.revoked_at is None and r.project_id in ids)
        return TenantView(
            id=rec.id,
            kind=rec.kind,
            path=rec.path,
            created_at=rec.created_at.isoformat(timespec="seconds"),
            limits=limits_view(rec.path, rec.limits),
            keys=keys,
            retain_responses_s=retain_s,
        )

    async def create_tenant(self, message: TenantRequest) -> TenantView:
        try:
            rec = await self._keys.tenancy.create(
                message.kind, message.path, parents=message.parents
            )
        except TenancyRefused as e:
            raise refuse(e) from None
        self._keys.rechain()
        return self._tenant_view(rec)

    async def list_tenants(self, message: ListTenantsRequest) -> ListTenantsReply:
        try:
            recs = self._keys.tenancy.list(message.kind, message.under)
        except TenancyRefused as e:
            raise refuse(e) from None
        kept = await self._store.retentions()
        return ListTenantsReply(tenants=[self._tenant_view(r, kept.get(r.id, 0)) for r in recs])

    async def rename_tenant(self, message: RenameTenantRequest) -> TenantView:
        try:
            rec = await self._keys.tenancy.rename(message.kind, message.path, message.new_name)
        except TenancyRefused as e:
            raise refuse(e) from None
        await self._keys.refresh()  # the keys' chains of limits take the new paths
        if self._mcp is not None:
            await self._mcp.registry.refresh()  # grants are matched by path on the hot path
        return self._tenant_view(rec, await self._store.retention_of(rec.id))

    async def remove_tenant(self, message: TenantRequest) -> RemoveTenantReply:
        tenancy = self._keys.tenancy
        rec = tenancy.get(message.path)
        try:
            gone = await tenancy.remove(message.kind, message.path, force=message.force)
        except TenancyRefused as e:
            raise refuse(e) from None
        await self._keys.refresh()  # its keys went with it
        if self._mcp is not None and gone.grants:
            await self._mcp.registry.refresh()
        if self._batches is not None:
            # A running batch of a removed project is dropped here; its row is gone.
            for batch_id in gone.batches:
                self._batches.active.pop(batch_id, None)
        return RemoveTenantReply(
            path=message.path,
            removed=True,
            id=rec.id if rec is not None else "",
            levels=gone.levels,
            keys_removed=len(gone.live_keys) + gone.spent_keys,
            files_removed=len(gone.files),
            batches_removed=len(gone.batches),
            grants_removed=len(gone.grants),
            responses_removed=gone.stored_responses,
        )

    async def set_retention(self, message: SetRetentionRequest) -> TenantView:
        """How long a project keeps the responses its keys ask to store; 0 turns it off
        and forgets those kept."""
        path, retain_s = message.path, message.retain_responses_s
        try:
            check_path("project", path)
        except TenancyRefused as e:
            raise refuse(e) from None
        if retain_s != 0 and not MIN_RETAIN_S <= retain_s <= MAX_RETAIN_S:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"a retention of {retain_s} s is out of range: from {MIN_RETAIN_S} s to"
                f" {MAX_RETAIN_S // 86400} days, or 0 (off)",
            )
        rec = self._keys.tenancy.get(path)
        if rec is None or not await self._store.set_retention(rec.id, retain_s):
            raise GRPCError(
                Status.NOT_FOUND,
                f"no project {path!r}; make it with: llmgw ctl project create --parents {path}",
            )
        return self._tenant_view(rec, retain_s)
