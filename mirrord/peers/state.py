"""The peers of one mirror: who they are (mirror.yaml's and peers.json's) and how far each is.

Per peer, what ``peers list`` shows:

    state           unknown (not read yet), syncing (copying from it now), in_step
                    (everything it held when last read is here), behind (some is
                    not: a copy failed or was refused; reason says why), down
                    (its state could not be read; reason says why)
    behind          how many of its revisions, removals and refs are not taken here
    lag_s           now - the last time everything it held was known here; -1: never
    last_sync_unix  when its state was last read

Peers added at run time are kept in ``<data_dir>/peers.json`` ({"peers": [url…]});
mirror.yaml's are always there and cannot be removed at run time.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from llmgw.errors import LlmgwError
from llmgw.fsutil import write_atomic
from llmgw.mirror.config import check_mirror_url
from llmgw.mirror.wire import Peer, PeerState

PEERS_FILE = "peers.json"


class PeerRefused(LlmgwError):
    """A peer that cannot be added or removed as asked."""

    code = "invalid"


class PeerNotFound(PeerRefused):
    code = "not_found"


class PeerFromConfig(PeerRefused):
    code = "conflict"


@dataclass
class PeerRecord:
    url: str
    from_config: bool
    state: PeerState = "unknown"
    behind: int = 0
    last_sync_unix: float = 0.0
    # When everything the peer held (its state as read then) was last held here; -1: never.
    in_step_unix: float = -1.0
    reason: str = ""

    def wire(self, now: float | None = None) -> Peer:
        now = time.time() if now is None else now
        lag = max(0.0, now - self.in_step_unix) if self.in_step_unix >= 0 else -1.0
        return Peer(
            url=self.url,
            state=self.state,
            lag_s=round(lag, 3),
            behind=self.behind,
            last_sync_unix=self.last_sync_unix,
            reason=self.reason,
        )

    def down(self, reason: str, now: float) -> None:
        self.state = "down"
        self.reason = reason
        self.last_sync_unix = now

    def read(self, behind: int, read_unix: float, reason: str = "") -> None:
        """The peer's state, read at ``read_unix``, has been taken here but for ``behind``."""
        self.behind = behind
        self.last_sync_unix = read_unix
        self.reason = reason
        if behind == 0:
            self.state = "in_step"
            self.in_step_unix = read_unix
        else:
            self.state = "behind"


class PeerBook:
    """The peers' URLs and records; run-time additions persisted beside the store."""

    def __init__(self, config_peers: list[str], data_dir: Path | None) -> None:
        self.path = Path(data_dir) / PEERS_FILE if data_dir is not None else None
        self.records: dict[str, PeerRecord] = {}
        for url in config_peers:
            url = check_mirror_url(url, "a peer")
            self.records.setdefault(url, PeerRecord(url=url, from_config=True))
        for url in self._load():
            self.records.setdefault(url, PeerRecord(url=url, from_config=False))

    def _load(self) -> list[str]:
        if self.path is None or not self.path.is_file():
            return []
        try:
            data = json.loads(self.path.read_text())
            return [check_mirror_url(str(u), "a peer") for u in data.get("peers", [])]
        except (OSError, ValueError, AttributeError) as e:
            raise PeerRefused(
                f"{self.path} cannot be read: {e}",
                hint="it lists the peers added with `llmgw ctl mirror peers add`; "
                "fix it or remove it and add them again",
            ) from e

    def _save(self) -> None:
        if self.path is None:
            return
        added = [r.url for r in self.records.values() if not r.from_config]
        write_atomic(self.path, json.dumps({"peers": added}, indent=1) + "\n")

    def urls(self) -> list[str]:
        return list(self.records)

    def get(self, url: str) -> PeerRecord | None:
        return self.records.get(url)

    def add(self, url: str) -> PeerRecord:
        """Add a peer (kept in peers.json); one known already is left as it is."""
        try:
            url = check_mirror_url(url, "a peer")
        except ValueError as e:
            raise PeerRefused(
                str(e), hint="e.g. llmgw ctl mirror peers add http://10.0.0.6:7080"
            ) from e
        if url not in self.records:
            self.records[url] = PeerRecord(url=url, from_config=False)
            self._save()
        return self.records[url]

    def remove(self, url: str) -> None:
        url = url.rstrip("/")
        rec = self.records.get(url)
        if rec is None:
            raise PeerNotFound(
                f"{url} is not a peer of this mirror",
                hint="see its peers with: llmgw ctl mirror peers list",
            )
        if rec.from_config:
            raise PeerFromConfig(
                f"{url} is a peer in mirror.yaml",
                hint="remove it from mirror.yaml's peers (or the --peer flag) and restart the mirror",
            )
        del self.records[url]
        self._save()

    def wire(self, now: float | None = None) -> list[Peer]:
        now = time.time() if now is None else now
        return [r.wire(now) for r in self.records.values()]
