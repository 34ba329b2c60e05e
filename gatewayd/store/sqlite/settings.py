"""SQLite: the versions of the cluster's kept settings."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from gatewayd.store.settings_records import SettingsConflict, SettingsVersion
from gatewayd.store.sqlite.codec import _from_text, _json, _to_text

_COLUMNS = "version, document, author, at, comment, parent_version"


def _version(row) -> SettingsVersion:
    return SettingsVersion(
        version=row["version"],
        document=json.loads(row["document"]),
        author=row["author"],
        at=_from_text(row["at"]),
        comment=row["comment"],
        parent_version=row["parent_version"],
    )


class SqliteSettings:
    """Mixed into SqliteStore; uses its connection, lock and error mapping."""

    async def latest_settings_version(self) -> int:
        async with self._lock:
            with self._mapped("read the settings' newest version"):
                async with self._conn.execute(
                    "SELECT COALESCE(MAX(version), 0) AS v FROM settings_versions"
                ) as cur:
                    row = await cur.fetchone()
        return int(row["v"])

    async def get_settings(self, version: int = 0) -> SettingsVersion | None:
        where = "WHERE version = ?" if version else "ORDER BY version DESC LIMIT 1"
        params = (version,) if version else ()
        async with self._lock:
            with self._mapped(f"read settings version {version or 'newest'}"):
                async with self._conn.execute(
                    f"SELECT {_COLUMNS} FROM settings_versions {where}", params
                ) as cur:
                    row = await cur.fetchone()
        return None if row is None else _version(row)

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
        async with self._lock:
            with self._mapped(f"write settings version {version}"):
                cur = await self._conn.execute(
                    f"INSERT INTO settings_versions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (version) DO NOTHING",
                    (version, _json(document), author, _to_text(at), comment, parent_version),
                )
                written = cur.rowcount == 1
        if not written:
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
        async with self._lock:
            with self._mapped("list the settings' versions"):
                async with self._conn.execute(
                    f"SELECT {_COLUMNS} FROM settings_versions ORDER BY version DESC LIMIT ?",
                    (limit,),
                ) as cur:
                    rows = await cur.fetchall()
        return [_version(r) for r in rows]
