"""Credentials sealed before their server's origin was bound in: sealed again for it at start.

Until origins were bound (gatewayd.mcp.seal), a sealed value's associated data
was its ref alone, so a server's address changed in the store (by hand, or by
``ctl mcp change --url`` before it dropped them) took its credentials along.
Such a value is marked in the store (migration 0016_mcp_origin); when
gatewayd starts, each is opened as it was sealed and sealed again for the
origin of the server that refers to it, so no server whose address stayed
where it was loses its credential. A control plane starting beside this one
may do the same at once: each row is rewritten once, by whichever comes first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gatewayd.mcp.seal import Sealer, SealError
from llmgw.mcp.names import McpNameRefused, origin_of

if TYPE_CHECKING:
    from gatewayd.store.base import Store

log = logging.getLogger(__name__)


async def bind_origins(store: Store, sealer: Sealer) -> int:
    """Seal every unbound credential again for its server's origin; how many were.

    ``store`` is either backend, both of which are UnboundSeals too
    (gatewayd.store.mcp_seal_rows).

    One that does not open (the seal key was replaced) is left as it is, said once
    in the log: its server answers the same SealError at its next call, with the
    words on how to set it again, and the next start tries again.
    """
    unbound = await store.list_unbound_sealed_secrets()
    if not unbound:
        return 0
    owners = {
        ref: rec for rec in await store.list_mcp_servers() for ref in rec.secret_refs.values()
    }
    bound = 0
    for ref, blob in unbound.items():
        rec = owners.get(ref)
        if rec is None:
            continue  # no server uses it: the next change that saves a server deletes it
        try:
            origin = origin_of(rec.url)
            value = sealer.open_unbound(blob, ref)
        except (SealError, McpNameRefused) as e:
            log.warning("the credential %s of MCP server %s stays as it was: %s", ref, rec.name, e)
            continue
        if await store.bind_sealed_secret(ref, sealer.seal(value, ref, origin)):
            bound += 1
    if bound:
        log.info("sealed %d MCP credential(s) again, each for its server's origin", bound)
    return bound
