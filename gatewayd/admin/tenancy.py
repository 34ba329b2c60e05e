"""Admin RPCs for organizations, teams and projects."""

from __future__ import annotations

from gatewayd.admin.keys import limits_view, refuse
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.gateway.policy.tenancy import TenancyRefused
from gatewayd.store import TenantRecord
from proto.llmgw.v1 import (
    ListTenantsReply,
    ListTenantsRequest,
    RemoveTenantReply,
    RenameTenantRequest,
    TenantRequest,
    TenantView,
)


class TenancyAdmin:
    """Mixed into AdminService."""

    _keys: KeyCache

    def _tenant_view(self, rec: TenantRecord) -> TenantView:
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
        return ListTenantsReply(tenants=[self._tenant_view(r) for r in recs])

    async def rename_tenant(self, message: RenameTenantRequest) -> TenantView:
        try:
            rec = await self._keys.tenancy.rename(message.kind, message.path, message.new_name)
        except TenancyRefused as e:
            raise refuse(e) from None
        await self._keys.refresh()  # keys' projects moved with it
        return self._tenant_view(rec)

    async def remove_tenant(self, message: TenantRequest) -> RemoveTenantReply:
        try:
            await self._keys.tenancy.remove(
                message.kind, message.path, live_keys=self._keys.live_keys(message.path)
            )
        except TenancyRefused as e:
            raise refuse(e) from None
        self._keys.rechain()
        return RemoveTenantReply(path=message.path, removed=True)
