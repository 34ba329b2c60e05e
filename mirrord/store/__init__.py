"""The mirror's store: content-addressed blobs and commit-pinned revisions under a data dir."""

from llmgw.mirror.names import NameRefused
from mirrord.store.errors import Incomplete, NotHeld, QuotaExceeded, StoreError
from mirrord.store.store import MirrorStore

__all__ = ["Incomplete", "MirrorStore", "NameRefused", "NotHeld", "QuotaExceeded", "StoreError"]
