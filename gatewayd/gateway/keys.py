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
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gatewayd.gateway.limits import UNLIMITED, Limits
from gatewayd.store import KeyRecord, Store

log = logging.getLogger(__name__)

SECRET_PREFIX = "llmgw-"
REFRESH_S = 2.0
_ELEMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class KeyRefused(Exception):
    """A key the admin API refuses to make or change (``kind``: invalid / not_found)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


def check_project(path: str) -> str:
    parts = path.split("/")
    if len(parts) != 3 or not all(_ELEMENT.fullmatch(p) for p in parts):
        raise KeyRefused(
            "invalid",
            f"project {path!r} must be ORG/TEAM/PROJECT, each 1-63 letters, digits, '.', '_'"
            " or '-', not starting with a dot",
        )
    return path


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

    def refusal(self, now: datetime) -> str:
        """Why the key may not be used now ("" when it may)."""
        if self.revoked:
            return "this API key was revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "this API key has expired"
        return ""

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models


def _info(rec: KeyRecord) -> KeyInfo:
    return KeyInfo(
        rec.key_id,
        rec.project,
        frozenset(rec.models),
        rec.expires_at,
        rec.revoked_at is not None,
        Limits.model_validate(rec.limits),
    )


class KeyCache:
    def __init__(self, store: Store):
        self._store = store
        self._by_hash: dict[str, KeyInfo] = {}
        self._records: dict[str, KeyRecord] = {}
        self._used: dict[str, datetime] = {}

    async def refresh(self) -> None:
        records = await self._store.list_keys()
        self._records = {r.key_id: r for r in records}
        self._by_hash = {r.secret_sha256: _info(r) for r in records}

    async def run(self) -> None:
        """Refresh from the store and write last use back, until cancelled."""
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                used, self._used = self._used, {}
                await self._store.touch_keys(used)
                await self.refresh()
            except Exception:
                log.exception("refreshing the API keys failed; the last ones stay in force")

    def lookup(self, secret: str) -> KeyInfo | None:
        info = self._by_hash.get(secret_hash(secret))
        if info is not None:
            self._used[info.key_id] = datetime.now(UTC)
        return info

    def records(self, project: str = "") -> list[KeyRecord]:
        recs = sorted(self._records.values(), key=lambda r: (r.created_at, r.key_id))
        return [r for r in recs if not project or r.project == project]

    async def create(
        self,
        project: str,
        name: str,
        models: list[str],
        expires_in_s: int,
        *,
        rpm: int = 0,
        tpm: int = 0,
    ) -> tuple[KeyRecord, str]:
        check_project(project)
        if expires_in_s < 0 or rpm < 0 or tpm < 0:
            raise KeyRefused("invalid", "expiry and limits must not be negative")
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        rec = KeyRecord(
            key_id="key_" + secrets.token_hex(6),
            project=project,
            name=name,
            secret_sha256=secret_hash(secret),
            prefix=secret[: len(SECRET_PREFIX) + 4],
            models=sorted(set(models)),
            limits={"rpm": rpm or None, "tpm": tpm or None},
            created_at=now,
            expires_at=now + timedelta(seconds=expires_in_s) if expires_in_s else None,
        )
        await self._store.put_key(rec)
        self._records[rec.key_id] = rec
        self._by_hash[rec.secret_sha256] = _info(rec)
        return rec, secret

    async def revoke(self, key_id: str) -> KeyRecord:
        rec = self._records.get(key_id)
        if rec is None:
            raise KeyRefused("not_found", f"no key {key_id!r}; see: llmgw ctl keys list")
        if rec.revoked_at is None:
            rec = rec.model_copy(update={"revoked_at": datetime.now(UTC)})
            await self._store.put_key(rec)
            self._records[key_id] = rec
            self._by_hash[rec.secret_sha256] = _info(rec)
        return rec
