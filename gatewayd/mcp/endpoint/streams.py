"""The open notification streams of /mcp, by owner, and what is relayed on them.

A legacy session's GET stream and a 2026-07-28 key's ``subscriptions/listen``
streams are both here, filed under the same owner their upstream connections
are (the session id, or ``key:<key_id>``): an upstream's
``notifications/tools/list_changed`` goes to its owner's streams, a change of
servers or grants to every stream (what a caller may see has changed).
"""

from __future__ import annotations

import asyncio
import logging

from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from gatewayd.mcp.endpoint.errors import notification_bytes, result_bytes
from gatewayd.mcp.endpoint.wire import sse_frame

log = logging.getLogger(__name__)

TOOLS_CHANGED = "notifications/tools/list_changed"
# The change notifications a stream may carry, by the listen filter's flag for each.
_FLAGS = {
    TOOLS_CHANGED: "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}
# Frames a stream holds for a client that stopped reading; past it the stream is
# ended (the client opens another and lists again: these are level triggers).
MAX_QUEUED = 256


class Stream:
    """One open SSE answer: frames queued for it; None ends it."""

    __slots__ = ("ended", "flags", "owner", "queue", "sub_id")

    def __init__(self, owner: str, sub_id=None, flags: frozenset[str] | None = None):
        self.owner = owner
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(MAX_QUEUED + 1)
        self.sub_id = sub_id  # the listen request's id (2026-07-28); None: a legacy GET stream
        self.flags = flags  # the honored filter of a listen stream; None: everything
        self.ended = False

    def put(self, method: str) -> None:
        if self.ended:
            return
        if self.flags is not None and _FLAGS.get(method) not in self.flags:
            return
        params = None if self.sub_id is None else {"_meta": self.meta()}
        if self.queue.qsize() >= MAX_QUEUED:
            log.warning("an /mcp stream's client stopped reading; ending the stream")
            self.end()
            return
        self.queue.put_nowait(sse_frame(notification_bytes(method, params)))

    def meta(self) -> dict:
        return {SUBSCRIPTION_ID_META_KEY: self.sub_id}

    def closing_frame(self) -> bytes:
        """The listen request's result, sent when the gateway ends the stream on purpose."""
        return sse_frame(
            result_bytes(self.sub_id, {"_meta": self.meta(), "resultType": "complete"})
        )

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            # Past the bound the queue has one slot kept for this.
            self.queue.put_nowait(None)


class Streams:
    def __init__(self) -> None:
        self._by_owner: dict[str, set[Stream]] = {}

    def open(self, owner: str, sub_id=None, flags: frozenset[str] | None = None) -> Stream:
        s = Stream(owner, sub_id, flags)
        self._by_owner.setdefault(owner, set()).add(s)
        return s

    def close(self, s: Stream) -> None:
        s.ended = True
        held = self._by_owner.get(s.owner)
        if held is not None:
            held.discard(s)
            if not held:
                del self._by_owner[s.owner]

    def count(self, owner: str | None = None) -> int:
        if owner is not None:
            return len(self._by_owner.get(owner, ()))
        return sum(len(v) for v in self._by_owner.values())

    def notify(self, owner: str, method: str) -> None:
        """An owner's upstream said its list changed: tell the owner's streams."""
        if method not in _FLAGS:
            return
        for s in list(self._by_owner.get(owner, ())):
            s.put(method)

    def broadcast(self, method: str = TOOLS_CHANGED) -> None:
        """Servers or grants changed: every stream's caller may see other tools now."""
        for held in list(self._by_owner.values()):
            for s in list(held):
                s.put(method)

    def end_owner(self, owner: str) -> None:
        for s in list(self._by_owner.get(owner, ())):
            s.end()

    def end_all(self) -> None:
        for held in list(self._by_owner.values()):
            for s in list(held):
                s.end()
