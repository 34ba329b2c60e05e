"""PostgreSQL: the versions of the cluster's kept settings."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gatewayd.store.postgres.catalog import _aware
from gatewayd.store.settings_records import SettingsConflict, SettingsVersion

_COLUMNS = "version, document, author, at, comment, parent_version"


class PostgresSettings:
    """Mixed into PostgresStore; uses its pool and error mapping."""

    async def latest_settings_version(self) -> int:
        with self._mapped("read the settings' newest version"):
            return int(
                await self._conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM settings_versions")
            )

    async def get_settings(self, version: int = 0) -> SettingsVersion | None:
        with self._mapped(f"read settings version {version or 'newest'}"):
            if version:
                row = await self._conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM settings_versions WHERE version = $1", version
                )
            else:
                row = await self._conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM settings_versions ORDER BY version DESC LIMIT 1"
                )
        return None if row is None else SettingsVersion(**dict(row))

    async def put_settings(
        self,
        document: dict[str, Any],
        *,
        parent_version: int,
        author: str,
        comment: str,
        at: datetime,
    ) -> SettingsVersion:
        version = parent_version + 1
        with self._mapped(f"write settings version {version}"):
            status = await self._conn.execute(
                f"INSERT INTO settings_versions ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"
                " ON CONFLICT (version) DO NOTHING",
                version,
                document,
                author,
                _aware(at),
                comment,
                parent_version,
            )
        if status != "INSERT 0 1":
            raise SettingsConflict(parent_version, await self.get_settings())
        return SettingsVersion(
            version=version,
            document=document,
            author=author,
            at=at,
            comment=comment,
            parent_version=parent_version,
        )

    async def list_settings_versions(self, *, limit: int = 50) -> list[SettingsVersion]:
        with self._mapped("list the settings' versions"):
            rows = await self._conn.fetch(
                f"SELECT {_COLUMNS} FROM settings_versions ORDER BY version DESC LIMIT $1", limit
            )
        return [SettingsVersion(**dict(r)) for r in rows]
