"""The control planes of a cluster, in words: who leads and since when, and the store's state.

Shared by ``llmgw ctl status`` and the console's header and Overview.
"""

from __future__ import annotations

from datetime import datetime

from rich.table import Table
from rich.text import Text

from proto.llmgw.v1 import ControlPlaneView, StatusReply

ROLE_STYLES = {"leader": "bold green", "standby": "cyan", "gone": "red"}


def _since(iso: str, now: datetime | None = None) -> str:
    """'since 10:04:31 (3 min)' from an ISO 8601 time; '' when there is none."""
    if not iso:
        return ""
    try:
        at = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    now = now or datetime.now(at.tzinfo)
    secs = max(0, int((now - at).total_seconds()))
    if secs < 120:
        ago = f"{secs} s"
    elif secs < 7200:
        ago = f"{secs // 60} min"
    elif secs < 172800:
        ago = f"{secs // 3600} h"
    else:
        ago = f"{secs // 86400} d"
    return f"since {at.astimezone().strftime('%Y-%m-%d %H:%M:%S')} ({ago})"


def leader_words(s: StatusReply) -> str:
    """'cp-a leads since … · store ok' (or why no one leads)."""
    if s.leader_id:
        who = "this control plane" if s.leader_id == s.control_plane_id else s.leader_id
        text = f"{who} leads {_since(s.leader_since)}".rstrip()
    else:
        text = f"no control plane leads (a lease of {s.lease_ttl_s or 10} s is changing hands)"
    store = s.store_state or "ok"
    return f"{text} · store {store}"


def header_line(s: StatusReply | None) -> str:
    """The header's part on the control planes: empty for a lone leader with a healthy store."""
    if s is None:
        return ""
    live = [c for c in s.control_planes if c.role != "gone"]
    store = s.store_state or "ok"
    if len(live) <= 1 and s.leader and store == "ok":
        return ""
    role = "leader" if s.leader else "standby"
    leader = s.leader_id or "none"
    text = f"{role} · leader {leader} · {len(live)} control planes"
    if store != "ok":
        text += f" · store: {store}"
    return text


def control_planes_table(planes: list[ControlPlaneView], me: str = "") -> Table:
    t = Table(box=None, pad_edge=False)
    for col in ("CONTROL PLANE", "ROLE", "HOST", "AGENTS DIAL", "API", "VERSION", "SEEN", "STORE"):
        t.add_column(col)
    for c in planes:
        name = c.control_plane_id + (" (this one)" if c.control_plane_id == me else "")
        role = Text(c.role, style=ROLE_STYLES.get(c.role, ""))
        if c.role == "leader" and c.leader_since:
            role.append(f" {_since(c.leader_since)}", style="dim")
        t.add_row(
            name,
            role,
            c.hostname,
            c.agent_address,
            c.http_url,
            c.version,
            _since(c.last_seen_at).removeprefix("since "),
            c.store_state or "ok",
        )
    return t
