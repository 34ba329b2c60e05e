"""A version of the cluster's kept settings, as the store keeps it, and the refusal of a stale write."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from llmgw.errors import ConflictError


class SettingsVersion(BaseModel):
    """One version of the settings document: what it said, who made it, when and from what.

    ``parent_version`` is the version it was made from (0 for the first);
    versions are numbered 1, 2, 3 … without gaps, since each is written as
    its parent's number plus one.
    """

    version: int
    document: dict[str, Any]
    author: str = ""
    at: datetime
    comment: str = ""
    parent_version: int = 0


class SettingsConflict(ConflictError):
    """A version written from a parent another writer had already moved past.

    ``latest`` is the newest version now: the change is to be made again on it.
    """

    def __init__(self, parent_version: int, latest: SettingsVersion | None) -> None:
        self.parent_version = parent_version
        self.latest = latest
        newest = latest.version if latest is not None else 0
        by = f" by {latest.author}" if latest is not None and latest.author else ""
        at = f" at {latest.at.isoformat(timespec='seconds')}" if latest is not None else ""
        super().__init__(
            f"the settings were changed since version {parent_version}: version {newest} was "
            f"written{by}{at}",
            hint=f"make the change again on version {newest} (llmgw ctl config get shows it)",
        )
