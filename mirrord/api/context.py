"""What every route of the mirror reaches: the store, the credentials, the background parts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mirrord.http.auth import Auth
from mirrord.store import MirrorStore


@dataclass
class MirrorContext:
    store: MirrorStore
    auth: Auth
    version: str
    upstream: str = ""
    # mirrord.pull.PullJobs, mirrord.pull.Uploads and mirrord.peers.PeerSync;
    # None in a mirror built without them (tests of serving alone).
    jobs: Any = None
    uploads: Any = None
    peers: Any = None

    def changed(self) -> None:
        """Something was added or removed here: peers hear of it at once."""
        if self.peers is not None:
            self.peers.notify()
