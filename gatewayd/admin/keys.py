"""Admin RPCs for API keys: create (the secret shown once), list, revoke."""

from __future__ import annotations

from datetime import datetime

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.gateway.keys import KeyCache, KeyRefused
from gatewayd.store import KeyRecord
from proto.llmgw.v1 import (
    CreateKeyRequest,
    KeyView,
    ListKeysReply,
    ListKeysRequest,
    RevokeKeyRequest,
)


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


def key_view(rec: KeyRecord, secret: str = "") -> KeyView:
    return KeyView(
        key_id=rec.key_id,
        project=rec.project,
        name=rec.name,
        prefix=rec.prefix,
        models=list(rec.models),
        created_at=_iso(rec.created_at),
        expires_at=_iso(rec.expires_at),
        revoked_at=_iso(rec.revoked_at),
        last_used_at=_iso(rec.last_used_at),
        secret=secret,
        rpm=rec.limits.get("rpm") or 0,
        tpm=rec.limits.get("tpm") or 0,
    )


def _refuse(e: KeyRefused) -> GRPCError:
    status = Status.NOT_FOUND if e.kind == "not_found" else Status.INVALID_ARGUMENT
    return GRPCError(status, e.message)


class KeyAdmin:
    """Mixed into AdminService."""

    _keys: KeyCache

    async def create_key(self, message: CreateKeyRequest) -> KeyView:
        try:
            rec, secret = await self._keys.create(
                message.project,
                message.name,
                list(message.models),
                message.expires_in_s,
                rpm=message.rpm,
                tpm=message.tpm,
            )
        except KeyRefused as e:
            raise _refuse(e) from None
        return key_view(rec, secret)

    async def list_keys(self, message: ListKeysRequest) -> ListKeysReply:
        return ListKeysReply(keys=[key_view(r) for r in self._keys.records(message.project)])

    async def revoke_key(self, message: RevokeKeyRequest) -> KeyView:
        try:
            return key_view(await self._keys.revoke(message.key_id))
        except KeyRefused as e:
            raise _refuse(e) from None
