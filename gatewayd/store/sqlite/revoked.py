"""SQLite: revoked node certificates."""

from __future__ import annotations

from gatewayd.store.revoked_records import RevokedCert
from gatewayd.store.sqlite.codec import _from_text, _to_text

_COLUMNS = "serial, node_id, fingerprint_sha256, reason, revoked_at"


class SqliteRevoked:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def revoke_cert(self, rec: RevokedCert) -> bool:
        async with self._lock:
            with self._mapped(f"revoke the certificate of node {rec.node_id}"):
                cur = await self._conn.execute(
                    f"INSERT INTO revoked_certs ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (serial) DO NOTHING",
                    (
                        rec.serial,
                        rec.node_id,
                        rec.fingerprint_sha256,
                        rec.reason,
                        _to_text(rec.revoked_at),
                    ),
                )
                return cur.rowcount == 1

    async def list_revoked_certs(self) -> list[RevokedCert]:
        async with self._lock:
            with self._mapped("list revoked certificates"):
                async with self._conn.execute(
                    f"SELECT {_COLUMNS} FROM revoked_certs ORDER BY revoked_at, serial"
                ) as cur:
                    rows = await cur.fetchall()
        return [
            RevokedCert(
                serial=r["serial"],
                node_id=r["node_id"],
                fingerprint_sha256=r["fingerprint_sha256"],
                reason=r["reason"],
                revoked_at=_from_text(r["revoked_at"]),
            )
            for r in rows
        ]
