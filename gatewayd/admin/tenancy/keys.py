"""Admin RPCs for API keys: create (the secret shown once), list, revoke, rotate, limits."""

from __future__ import annotations

from datetime import datetime

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from pydantic import ValidationError

from gatewayd.gateway.policy.keys import KeyCache, KeyRefused
from gatewayd.gateway.policy.limits import Limits
from gatewayd.gateway.policy.tenancy import LIMIT_FIELDS, TenancyRefused, kind_of, limits_of
from gatewayd.store import KeyRecord
from proto.llmgw.v1 import (
    CreateKeyRequest,
    KeyView,
    LimitsView,
    ListKeysReply,
    ListKeysRequest,
    RevokeKeyRequest,
    RotateKeyRequest,
    SetLimitsRequest,
)


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


def limits_view(scope: str, raw: dict) -> LimitsView:
    limits = limits_of(raw)
    return LimitsView(scope=scope, **limits.model_dump())


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
        kind=rec.kind,
        limits=limits_view(rec.key_id, rec.limits),
        band=rec.band,
        rotated_from=rec.rotated_from,
        rotated_to=rec.rotated_to,
    )


_STATUS = {
    "not_found": Status.NOT_FOUND,
    "conflict": Status.ALREADY_EXISTS,
    "invalid": Status.INVALID_ARGUMENT,
}


def refuse(e: KeyRefused | TenancyRefused) -> GRPCError:
    return GRPCError(_STATUS.get(e.kind, Status.INVALID_ARGUMENT), e.message)


def merged_limits(current: dict, message: SetLimitsRequest) -> Limits:
    """The limits a SetLimits call leaves: only the fields given change, unless ``replace``."""
    unknown = set(message.clear) - set(LIMIT_FIELDS)
    if unknown:
        raise GRPCError(
            Status.INVALID_ARGUMENT,
            f"cannot clear {', '.join(sorted(unknown))}: the limits are {', '.join(LIMIT_FIELDS)}",
        )
    given = message.limits or LimitsView()
    values = {} if message.replace else dict(limits_of(current).model_dump(exclude_none=True))
    for name in LIMIT_FIELDS:
        value = getattr(given, name)
        if value is not None:
            values[name] = value
    for name in message.clear:
        values.pop(name, None)
    try:
        return Limits.model_validate(values)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise GRPCError(Status.INVALID_ARGUMENT, f"{field}: {first['msg']}") from None


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
                budget_month_micros=message.budget_month_micros,
                band=message.band,
            )
        except KeyRefused as e:
            raise refuse(e) from None
        return key_view(rec, secret)

    async def list_keys(self, message: ListKeysRequest) -> ListKeysReply:
        return ListKeysReply(keys=[key_view(r) for r in self._keys.records(message.project)])

    async def revoke_key(self, message: RevokeKeyRequest) -> KeyView:
        try:
            return key_view(await self._keys.revoke(message.key_id))
        except KeyRefused as e:
            raise refuse(e) from None

    async def rotate_key(self, message: RotateKeyRequest) -> KeyView:
        try:
            rec, secret = await self._keys.rotate(message.key_id, message.overlap_s)
        except KeyRefused as e:
            raise refuse(e) from None
        return key_view(rec, secret)

    async def set_limits(self, message: SetLimitsRequest) -> LimitsView:
        scope = (message.limits or LimitsView()).scope
        if not scope:
            raise GRPCError(Status.INVALID_ARGUMENT, "say whose limits: a key id or a path")
        try:
            if scope.startswith("key_"):
                current = self._keys.get(scope).limits
                rec = await self._keys.set_limits(scope, merged_limits(current, message))
                return limits_view(scope, rec.limits)
            tenancy = self._keys.tenancy
            current = tenancy.require(kind_of(scope), scope).limits
            rec = await tenancy.set_limits(scope, merged_limits(current, message))
            self._keys.rechain()
            return limits_view(scope, rec.limits)
        except (KeyRefused, TenancyRefused) as e:
            raise refuse(e) from None
