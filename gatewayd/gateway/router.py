"""Which replica answers a request: the model's ready replicas, least busy first.

A session (the request's ``user`` or the ``x-llmgw-session`` header) sticks
to one replica by rendezvous hashing, so its prompt cache stays warm and a
replica joining or leaving moves only the sessions it must.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    replica_id: str
    base_url: str


def _weight(session: str, replica_id: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(f"{session}|{replica_id}".encode(), digest_size=8).digest(), "big"
    )


class Router:
    def __init__(self, ready: Callable[[str], list[Target]]):
        # model -> its ready replicas, read at each request (the controller's own state).
        self._ready = ready
        self.in_flight: dict[str, int] = {}

    def candidates(self, model: str, session: str = "") -> list[Target]:
        """The model's ready replicas in the order to try them."""
        targets = self._ready(model)
        if session:
            return sorted(targets, key=lambda t: _weight(session, t.replica_id), reverse=True)
        return sorted(targets, key=lambda t: (self.in_flight.get(t.replica_id, 0), t.replica_id))

    def begin(self, target: Target) -> None:
        self.in_flight[target.replica_id] = self.in_flight.get(target.replica_id, 0) + 1

    def end(self, target: Target) -> None:
        n = self.in_flight.get(target.replica_id, 1) - 1
        if n <= 0:
            self.in_flight.pop(target.replica_id, None)
        else:
            self.in_flight[target.replica_id] = n
