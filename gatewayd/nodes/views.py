"""NodeView: what the admin API answers about a node, built from record and live state."""

from __future__ import annotations

from datetime import datetime

from llmgw.labels import effective
from proto.llmgw.v1 import NodeView


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t else ""


def node_view(live) -> NodeView:
    """The view of a registry's NodeLive (host facts and GPUs as cached messages)."""
    rec, hb = live.record, live.heartbeat
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
        host=live.host_msg,
        gpus=live.gpus_msg,
        gpu_samples=list(hb.gpus) if hb else [],
        installable_engines=list(rec.installable_engines),
        registered_at=_iso(rec.registered_at),
        last_heartbeat_at=_iso(rec.last_heartbeat_at),
        heartbeat_seq=rec.heartbeat_seq,
        connected=live.connected,
        labels=effective(rec.labels, rec.operator_labels),
    )
