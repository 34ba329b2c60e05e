"""What a level of the tenancy tree holds, as a removal sees it."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TenantHoldings(BaseModel):
    """What a level and every level beneath it hold: what a removal refuses over, or takes.

    Names are listed whole (the caller shows a few); counts are their lengths.
    """

    # The level's own path and the paths beneath it, in path order.
    levels: list[str] = Field(default_factory=list)
    # Keys that still work (not revoked, not expired): "name (key_…)" or "key_…".
    live_keys: list[str] = Field(default_factory=list)
    # Keys revoked or expired: history, removed with the level without asking.
    spent_keys: int = 0
    # Files (uploads and batch outputs): "name (file-…)".
    files: list[str] = Field(default_factory=list)
    batches: list[str] = Field(default_factory=list)
    # MCP grants to the levels or to their keys: "SCOPE → TARGET" (scopes by path).
    grants: list[str] = Field(default_factory=list)
    stored_responses: int = 0

    @property
    def beneath(self) -> list[str]:
        """The levels beneath the one asked about (its own path left out)."""
        return self.levels[1:]

    @property
    def blocking(self) -> bool:
        """Whether a removal without --force is refused over any of it."""
        return bool(self.beneath or self.live_keys or self.files or self.batches or self.grants)


class TenantRemoval(BaseModel):
    """What ``Store.remove_tenant`` did: removed (and took ``held``), or refused over ``held``."""

    removed: bool
    held: TenantHoldings
