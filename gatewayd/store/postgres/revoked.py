"""PostgreSQL: revoked node certificates."""

from __future__ import annotations

from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.revoked_records import RevokedCert

_COLUMNS = "serial, node_id, fingerprint_sha256, reason, revoked_at"


class PostgresRevoked:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def revoke_cert(self, rec: RevokedCert) -> bool:
        with self._mapped(f"revoke the certificate of node {rec.node_id}"):
            status = await self._conn.execute(
                f"INSERT INTO revoked_certs ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"
                " ON CONFLICT (serial) DO NOTHING",
                rec.serial,
                rec.node_id,
                rec.fingerprint_sha256,
                rec.reason,
                _aware(rec.revoked_at),
            )
        return status == "INSERT 0 1"

    async def list_revoked_certs(self) -> list[RevokedCert]:
        with self._mapped("list revoked certificates"):
            rows = await self._conn.fetch(
                f'SELECT {_COLUMNS} FROM revoked_certs ORDER BY revoked_at, serial COLLATE "C"'
            )
        return [RevokedCert(**dict(r)) for r in rows]
