"""Admin RPCs for organizations, teams and projects."""

from __future__ import annotations

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.admin.tenancy.keys import limits_view, refuse
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

# The shortest retention worth keeping a response for (a turn or two of a conversation).
MIN_RETAIN_S = 60


class TenancyAdmin:
    """Mixed into AdminService."""

    _keys: KeyCache
    _store: Store

    def _tenant_view(self, rec: TenantRecord, retain_s: int = 0) -> TenantView:
        keys = sum(
            1
            for r in self._keys.records()
            if r.revoked_at is None
            and (r.project == rec.path or r.project.startswith(rec.path + "/"))
        )
        return TenantView(
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
        return ListTenantsReply(tenants=[self._tenant_view(r, kept.get(r.path, 0)) for r in recs])

    async def rename_tenant(self, message: RenameTenantRequest) -> TenantView:
        try:
            rec = await self._keys.tenancy.rename(message.kind, message.path, message.new_name)
        except TenancyRefused as e:
            raise refuse(e) from None
        await self._keys.refresh()  # keys' projects moved with it
        return self._tenant_view(rec, await self._store.retention_of(rec.path))

    async def remove_tenant(self, message: TenantRequest) -> RemoveTenantReply:
        try:
            await self._keys.tenancy.remove(
                message.kind, message.path, live_keys=self._keys.live_keys(message.path)
            )
        except TenancyRefused as e:
            raise refuse(e) from None
        self._keys.rechain()
        return RemoveTenantReply(path=message.path, removed=True)

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
        if rec is None or not await self._store.set_retention(path, retain_s):
            raise GRPCError(
                Status.NOT_FOUND,
                f"no project {path!r}; make it with: llmgw ctl project create --parents {path}",
            )
        return self._tenant_view(rec, retain_s)
