"""Revoked node certificates: the agent port refuses them, and closes a stream open with one.

The list lives in the store (so every control plane of an HA cluster sees a
revocation) and in memory here, loaded at start and refreshed, since the
agent port checks it on every connection. Certificates are told apart by
serial: the node id alone is not enough, because a node added again gets a
new certificate for the same id, and that one must connect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from gatewayd.store import Store
from gatewayd.store.revoked_records import RevokedCert, canonical_serial
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

# 10 s: a revocation made on another control plane reaches this one within
# that, and the revoked node's stream here is closed then.
REFRESH_S = 10.0

CloseStream = Callable[[str], None]


class Revocations:
    """The revoked serials, and the close function of every open agent stream."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._serials: set[str] = set()
        # serial -> (node id, close) for streams open now.
        self._streams: dict[str, tuple[str, CloseStream]] = {}
        # node id -> serial of the certificate it connected with last.
        self._last_serial: dict[str, str] = {}

    async def load(self) -> None:
        rows = await self._store.list_revoked_certs()
        fresh = {r.serial for r in rows} - self._serials
        self._serials |= fresh
        for serial in fresh:
            self._close(serial)

    async def run(self, interval_s: float = REFRESH_S) -> None:
        """Refresh from the store until cancelled; a store error is logged and tried again."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.load()
            except StoreError as e:
                log.warning("could not refresh the revoked certificates; trying again: %s", e)
            except Exception:
                log.exception("could not refresh the revoked certificates; trying again")

    def is_revoked(self, serial: str) -> bool:
        return bool(serial) and serial in self._serials

    def last_serial(self, node_id: str) -> str:
        return self._last_serial.get(node_id, "")

    def opened(self, node_id: str, serial: str, close: CloseStream) -> None:
        """A stream of ``node_id`` is open with the certificate ``serial``."""
        self._last_serial[node_id] = serial
        self._streams[serial] = (node_id, close)

    def closed(self, serial: str, close: CloseStream) -> None:
        held = self._streams.get(serial)
        if held is not None and held[1] is close:
            del self._streams[serial]

    async def revoke(
        self, node_id: str, serial: str, *, fingerprint_sha256: str = "", reason: str = ""
    ) -> tuple[bool, bool]:
        """Record the revocation and close a stream open with it: (newly revoked, closed)."""
        serial = canonical_serial(serial)
        added = await self._store.revoke_cert(
            RevokedCert(
                serial=serial,
                node_id=node_id,
                fingerprint_sha256=fingerprint_sha256,
                reason=reason,
                revoked_at=datetime.now(UTC),
            )
        )
        self._serials.add(serial)
        return added, self._close(serial)

    def _close(self, serial: str) -> bool:
        held = self._streams.pop(serial, None)
        if held is None:
            return False
        node_id, close = held
        log.warning("closing the stream of node %s: its certificate was revoked", node_id)
        close("its certificate was revoked")
        return True


def peer_serial(peercert: dict | None) -> str:
    """The canonical serial of a verified peer certificate ("" when there is none)."""
    raw = (peercert or {}).get("serialNumber", "")
    try:
        return canonical_serial(raw) if raw else ""
    except ValueError:
        return ""
