"""API keys: made once and shown once, checked on the hot path from memory.

Only the SHA-256 of a secret is stored: secrets are 32 random bytes, so a
slow password hash would only slow every request. The cache is refreshed from
the store every couple of seconds, so a key revoked on any control plane stops
working everywhere within seconds; last use is written back in batches.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gatewayd.gateway.policy.limits import UNLIMITED, Limits
from gatewayd.gateway.policy.tenancy import Tenancy, TenancyRefused, check_path, limits_of
from gatewayd.store import KeyRecord, Store
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

SECRET_PREFIX = "llmgw-"
REFRESH_S = 2.0


class KeyRefused(Exception):
    """A key the admin API refuses to make or change (``kind``: invalid / not_found)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


def check_project(path: str) -> str:
    try:
        return check_path("project", path)
    except TenancyRefused as e:
        raise KeyRefused(e.kind, e.message) from None


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    project: str
    models: frozenset[str]
    expires_at: datetime | None
    revoked: bool
    limits: Limits = UNLIMITED
    # (scope, limits) of the key, its project, team and organization, the key first.
    scopes: tuple[tuple[str, Limits], ...] = ()
    band: str = ""
    # The project's id (ten_…): what the key's files, batches and responses belong to.
    project_id: str = ""

    def refusal(self, now: datetime) -> str:
        """Why the key may not be used now ("" when it may)."""
        if self.revoked:
            return "this API key was revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "this API key has expired"
        return ""

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models


def _info(rec: KeyRecord, tenancy: Tenancy | None = None, defaults: Limits = UNLIMITED) -> KeyInfo:
    limits = limits_of(rec.limits)
    if defaults is not UNLIMITED:
        # The kept settings' limits.key_default fill in what the key sets none of.
        limits = Limits(
            **(defaults.model_dump(exclude_none=True) | limits.model_dump(exclude_none=True))
        )
    own = (f"key:{rec.key_id}", limits)
    # The project's path now, from the tree (the record's may be a refresh behind a rename).
    project = tenancy.path_of(rec.project_id, rec.project) if tenancy is not None else rec.project
    chain = tenancy.chain(project) if tenancy is not None else ()
    return KeyInfo(
        rec.key_id,
        project,
        frozenset(rec.models),
        rec.expires_at,
        rec.revoked_at is not None,
        limits,
        (own, *chain),
        rec.band,
        rec.project_id,
    )


class KeyCache:
    def __init__(self, store: Store, tenancy: Tenancy | None = None):
        self._store = store
        self.tenancy = tenancy if tenancy is not None else Tenancy(store)
        self._by_hash: dict[str, KeyInfo] = {}
        self._records: dict[str, KeyRecord] = {}
        self._used: dict[str, datetime] = {}
        self._store_away = False  # the last refresh failed for want of the store
        # What a key that sets no limit of a field gets (the kept settings' limits.key_default).
        self.key_defaults: Limits = UNLIMITED

    def set_key_defaults(self, defaults: Limits) -> None:
        """Give every key that sets none of its own these limits, field by field, from now on."""
        self.key_defaults = defaults
        self._by_hash = {
            r.secret_sha256: _info(r, self.tenancy, defaults) for r in self._records.values()
        }

    async def refresh(self) -> None:
        await self.tenancy.refresh()
        records = await self._store.list_keys()
        self._records = {r.key_id: r for r in records}
        self._by_hash = {
            r.secret_sha256: _info(r, self.tenancy, self.key_defaults) for r in records
        }

    def _keep(self, rec: KeyRecord) -> None:
        self._records[rec.key_id] = rec
        self._by_hash[rec.secret_sha256] = _info(rec, self.tenancy, self.key_defaults)

    async def run(self) -> None:
        """Refresh from the store and write last use back, until cancelled."""
        while True:
            await asyncio.sleep(REFRESH_S)
            used, self._used = self._used, {}
            try:
                await self._store.touch_keys(used)
                await self.refresh()
            except StoreError as e:
                # The store is away (a failover, a cut): said once, in words, until it is
                # back; the last uses are kept for the next round, newer ones winning.
                self._used = used | self._used
                if not self._store_away:
                    log.warning("API keys not refreshed; the last ones stay in force: %s", e)
                    self._store_away = True
                continue
            except Exception:
                self._used = used | self._used
                log.exception("refreshing the API keys failed; the last ones stay in force")
                continue
            if self._store_away:
                log.info("API keys refreshed from the store again")
                self._store_away = False

    def info_of(self, secret_sha256: str) -> KeyInfo | None:
        """A key by the hash of its secret (what a batch keeps of the key that made it)."""
        return self._by_hash.get(secret_sha256)

    def lookup(self, secret: str) -> KeyInfo | None:
        info = self._by_hash.get(secret_hash(secret))
        if info is not None:
            self._used[info.key_id] = datetime.now(UTC)
        return info

    def records(self, project: str = "") -> list[KeyRecord]:
        """Keys (of the project at path ``project`` when given), oldest first, each with its
        project's path now."""
        want = ""
        if project:
            rec = self.tenancy.get(project)
            if rec is None:
                return []
            want = rec.id
        recs = sorted(self._records.values(), key=lambda r: (r.created_at, r.key_id))
        return [
            r.model_copy(update={"project": self.tenancy.path_of(r.project_id, r.project)})
            for r in recs
            if not want or r.project_id == want
        ]

    async def create(
        self,
        project: str,
        name: str,
        models: list[str],
        expires_in_s: int,
        *,
        rpm: int = 0,
        tpm: int = 0,
        budget_month_micros: int | None = None,
        band: str = "",
    ) -> tuple[KeyRecord, str]:
        check_project(project)
        try:
            owner = self.tenancy.require_project(project)
        except TenancyRefused as e:
            raise KeyRefused(e.kind, e.message) from None
        if expires_in_s < 0 or rpm < 0 or tpm < 0 or (budget_month_micros or 0) < 0:
            raise KeyRefused("invalid", "expiry, limits and budget must not be negative")
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        limits = {"rpm": rpm or None, "tpm": tpm or None}
        if budget_month_micros is not None:
            limits["budget_month_micros"] = budget_month_micros
        rec = KeyRecord(
            key_id="key_" + secrets.token_hex(6),
            project_id=owner.id,
            project=project,
            name=name,
            secret_sha256=secret_hash(secret),
            prefix=secret[: len(SECRET_PREFIX) + 4],
            models=sorted(set(models)),
            limits={k: v for k, v in limits.items() if v is not None},
            created_at=now,
            expires_at=now + timedelta(seconds=expires_in_s) if expires_in_s else None,
            band=band,
        )
        await self._store.put_key(rec)
        self._keep(rec)
        return rec, secret

    def get(self, key_id: str) -> KeyRecord:
        rec = self._records.get(key_id)
        if rec is None:
            raise KeyRefused("not_found", f"no key {key_id!r}; see: llmgw ctl keys list")
        return rec

    async def rotate(self, key_id: str, overlap_s: int) -> tuple[KeyRecord, str]:
        """A new key with the old one's project, models, limits and band; a new secret.

        The old secret keeps working for ``overlap_s`` seconds (0: it stops
        now), so clients can move to the new one without an outage.
        """
        old = self.get(key_id)
        if old.revoked_at is not None:
            raise KeyRefused("invalid", f"key {key_id} was revoked; make a new one instead")
        if old.rotated_to:
            raise KeyRefused(
                "invalid", f"key {key_id} was already rotated; rotate {old.rotated_to} instead"
            )
        if overlap_s < 0:
            raise KeyRefused("invalid", "the overlap must not be negative")
        now = datetime.now(UTC)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        new = old.model_copy(
            update={
                "key_id": "key_" + secrets.token_hex(6),
                "secret_sha256": secret_hash(secret),
                "prefix": secret[: len(SECRET_PREFIX) + 4],
                "created_at": now,
                "last_used_at": None,
                "kind": "service",
                "rotated_from": old.key_id,
                "rotated_to": "",
            }
        )
        ends = now + timedelta(seconds=overlap_s)
        if old.expires_at is not None and old.expires_at < ends:
            ends = old.expires_at
        old = old.model_copy(
            update={"kind": "rotated", "rotated_to": new.key_id, "expires_at": ends}
        )
        await self._store.put_key(new)
        await self._store.put_key(old)
        self._keep(new)
        self._keep(old)
        return new, secret

    async def set_limits(self, key_id: str, limits: Limits) -> KeyRecord:
        rec = self.get(key_id).model_copy(update={"limits": limits.model_dump(exclude_none=True)})
        await self._store.put_key(rec)
        self._keep(rec)
        return rec

    def rechain(self) -> None:
        """Rebuild every key's chain of limits after the tree's limits changed."""
        self._by_hash = {
            r.secret_sha256: _info(r, self.tenancy, self.key_defaults)
            for r in self._records.values()
        }

    async def revoke(self, key_id: str) -> KeyRecord:
        rec = self._records.get(key_id)
        if rec is None:
            raise KeyRefused("not_found", f"no key {key_id!r}; see: llmgw ctl keys list")
        if rec.revoked_at is None:
            rec = rec.model_copy(update={"revoked_at": datetime.now(UTC)})
            await self._store.put_key(rec)
            self._keep(rec)
        return rec
