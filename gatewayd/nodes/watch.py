"""Fan-out of change notices to Watch subscribers, coalesced per key.

A subscriber that falls behind is not sent every intermediate change, only
the latest of each key it has not yet seen: a console watching a thousand
heartbeating nodes gets at most one notice per node per drain.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


class Subscription:
    def __init__(self, topics: set[str]):
        self.topics = topics
        self._pending: dict[tuple[str, str], None] = {}
        self._wake = asyncio.Event()

    def offer(self, topic: str, key: str) -> None:
        if not self.topics or topic in self.topics:
            self._pending[(topic, key)] = None
            self._wake.set()

    async def changes(self) -> AsyncIterator[tuple[str, str]]:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = list(self._pending), {}
            for item in batch:
                yield item


class Broadcaster:
    def __init__(self) -> None:
        self._subs: set[Subscription] = set()

    def publish(self, topic: str, key: str) -> None:
        for sub in self._subs:
            sub.offer(topic, key)

    def subscribe(self, topics: list[str]) -> Subscription:
        sub = Subscription(set(topics))
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)
