"""What the store does for credentials sealed before origins were bound in (gatewayd.mcp.rebind).

``mcp_secrets.origin_bound`` (migration 0016_mcp_origin) is false for a value sealed
with its ref alone as associated data, true for every one sealed since. Both backends
implement this beside their MCP tables (sqlite/mcp_seal_rows.py, postgres/…).
"""

from __future__ import annotations

from typing import Protocol


class UnboundSeals(Protocol):
    async def list_unbound_sealed_secrets(self) -> dict[str, bytes]:
        """Ref -> sealed bytes of the secrets sealed before origins were bound."""

    async def bind_sealed_secret(self, ref: str, sealed: bytes) -> bool:
        """Replace an unbound secret by ``sealed`` (sealed for its server's origin), and
        mark it bound; False when it is gone or bound already (another control plane
        starting beside this one did it first)."""
