"""Mirrors kept in step with each other, removals included (see sync.py)."""

from mirrord.peers.copy import CopyFailed, CopyRefused
from mirrord.peers.plan import SyncPlan, plan_sync
from mirrord.peers.state import PeerFromConfig, PeerNotFound, PeerRefused
from mirrord.peers.sync import PeerDown, PeerSync

__all__ = [
    "CopyFailed",
    "CopyRefused",
    "PeerDown",
    "PeerFromConfig",
    "PeerNotFound",
    "PeerRefused",
    "PeerSync",
    "SyncPlan",
    "plan_sync",
]
