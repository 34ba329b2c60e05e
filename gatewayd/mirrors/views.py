"""The mirrors' answers (llmgw/mirror/wire.py) as the admin API's views (admin.proto Mirror*)."""

from __future__ import annotations

from datetime import UTC, datetime

from gatewayd.mirrors.set import MirrorState
from llmgw.mirror import wire
from proto.llmgw.v1 import (
    MirrorFileView,
    MirrorPeerView,
    MirrorPullView,
    MirrorRevisionView,
    MirrorView,
)


def iso_unix(t: float) -> str:
    """Unix seconds as RFC 3339 ("" for none)."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds") if t > 0 else ""


def mirror_view(s: MirrorState) -> MirrorView:
    info = s.info
    up = s.state == "up" and info is not None
    return MirrorView(
        url=s.url,
        state=s.state,
        reason=s.reason,
        version=info.version if info else "",
        mirror_id=info.mirror_id if info else "",
        checked_at=s.checked_at.isoformat(timespec="seconds") if s.checked_at else "",
        # What it told when last up; a mirror down shows none rather than stale numbers.
        used_bytes=info.used_bytes if up else 0,
        max_bytes=info.max_bytes if up else 0,
        free_disk_bytes=info.free_disk_bytes if up else 0,
        revisions=info.revisions if up else 0,
    )


def revision_view(r: wire.Revision) -> MirrorRevisionView:
    return MirrorRevisionView(
        kind=r.kind,
        repo=r.repo,
        commit=r.commit,
        refs=list(r.refs),
        size_bytes=r.size_bytes,
        files=r.file_count or len(r.files or []),
        added_at=iso_unix(r.added_unix),
        source=r.source,
        has_pickle=r.has_pickle,
    )


def file_view(f: wire.FileEntry) -> MirrorFileView:
    return MirrorFileView(
        path=f.path, size_bytes=f.size, sha256=f.sha256, lfs=f.lfs, pickle=f.pickle
    )


def error_text(e: wire.ErrorDetail | None) -> str:
    if e is None:
        return ""
    return e.message + (f" ({e.hint})" if e.hint else "")


def pull_view(p: wire.Pull) -> MirrorPullView:
    return MirrorPullView(
        pull_id=p.pull_id,
        source=p.source,
        repo=p.repo,
        commit=p.commit,
        state=p.state,
        file=p.file,
        bytes_done=p.bytes_done,
        bytes_total=p.bytes_total,
        rate_bytes_s=p.rate_bytes_s,
        eta_s=p.eta_s,
        files_done=p.files_done,
        files_total=p.files_total,
        error=error_text(p.error),
        started_at=iso_unix(p.started_unix),
    )


def peer_view(p: wire.Peer) -> MirrorPeerView:
    return MirrorPeerView(
        url=p.url,
        state=p.state,
        lag_s=p.lag_s,
        behind=p.behind,
        last_sync_at=iso_unix(p.last_sync_unix),
        reason=p.reason,
    )
