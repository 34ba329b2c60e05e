"""The key a test shows at a replica's engine door, as a control plane derives it.

Tests that ask a replica directly (to prove its engine serves, apart from the
gateway) go in through the door as the gateway does: with the replica's own
key, made from the cluster's engine secret (gatewayd/gateway/routing/engine_access.py).
"""

from __future__ import annotations

from pathlib import Path

from gatewayd.gateway.routing.engine_access import replica_key


def replica_headers(secrets_dir: Path, replica, epoch: int = 0) -> dict[str, str]:
    """``authorization`` for ``replica`` (a ReplicaView, or its JSON as ctl prints it)."""
    secret = (Path(secrets_dir) / "engine-key").read_text().strip()
    if isinstance(replica, dict):
        rid, starts = replica["replica_id"], int(replica.get("restarts") or 0)
    else:
        rid, starts = replica.replica_id, int(replica.restarts)
    return {"authorization": f"Bearer {replica_key(secret, rid, starts, epoch)}"}
