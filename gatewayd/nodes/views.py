"""NodeView: what the admin API answers about a node, built from record and live state."""

from __future__ import annotations

from datetime import datetime

from gatewayd.store import NodeRecord
from proto.llmgw.v1 import Gpu, Heartbeat, HostFacts, NodeView


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


def node_view(rec: NodeRecord, connected: bool, hb: Heartbeat | None) -> NodeView:
    return NodeView(
        node_id=rec.node_id,
        hostname=rec.hostname,
        state=rec.state,
        reason=rec.reason,
        state_since=_iso(rec.state_since),
        cordoned=rec.cordoned,
        draining=rec.draining,
        version=rec.version,
        address=rec.address,
        host=HostFacts.from_dict(rec.host) if rec.host else HostFacts(),
        gpus=[Gpu.from_dict(g) for g in rec.gpus],
        gpu_samples=list(hb.gpus) if hb else [],
        installable_engines=list(rec.installable_engines),
        registered_at=_iso(rec.registered_at),
        last_heartbeat_at=_iso(rec.last_heartbeat_at),
        heartbeat_seq=rec.heartbeat_seq,
        connected=connected,
    )
