"""Keeping a node's weights cache within its share of the disk, and telling the control plane.

``WeightsKeeper`` looks at the cache (cache.py) whenever something may have
changed it — the agent started, a shard started, finished fetching or
stopped, the limit changed, an entry was removed — and then:

- marks when each entry was last used (a shard started on it or left it);
- past the limit, removes the unused entries used longest ago until the cache
  is within it again, never one a shard on the node runs on or fetches into
  (the entry just fetched for a shard about to start is that shard's); when
  only entries in use are left over the limit, says so once, in words;
- sends a WeightsReport on the stream: after Register, then after each look,
  at most once a second however busy the node is.

``remove`` carries out a RemoveWeights command: the named entries and/or every
unused one, refusing those in use, in the lines a CommandAck carries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from agentd.weights import cache
from agentd.weights.cache import Entry, Limit, Use
from proto.llmgw.v1 import AgentMessage, CachedWeights, WeightsReport

log = logging.getLogger(__name__)

# At most one report a second: a node starting ten shards sends a few, not forty.
REPORT_EVERY_S = 1.0
# Evictions kept for the next report while the stream is down.
EVICTED_KEPT = 100
DEFAULT_PERCENT = 50

Send = Callable[[AgentMessage], None]


def size_words(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:.1f} MiB"


class WeightsKeeper:
    """The weights cache of one node: its limit, its evictions, its reports.

    ``uses`` answers, at the moment it is called, what the node's shards hold
    (``ShardRunner.weights_uses``).
    """

    def __init__(
        self,
        cache_dir: Path,
        uses: Callable[[], list[Use]],
        *,
        report_every_s: float = REPORT_EVERY_S,
    ) -> None:
        self.cache_dir = Path(cache_dir)
        self._uses = uses
        self.report_every_s = report_every_s
        self.percent, self.max_bytes = DEFAULT_PERCENT, 0
        self._send: Send | None = None
        self._dirty = asyncio.Event()
        # One look or removal at a time: both rename entries away.
        self._lock = asyncio.Lock()
        # key -> the replicas that held it at the last look (to mark when that changes).
        self._holders: dict[str, frozenset[str]] = {}
        self._evicted: list[str] = []
        self._note_said = ""
        self._purges: set[asyncio.Task] = set()
        self.last_report: WeightsReport | None = None

    # -- what the agent tells it ------------------------------------------------------

    def set_limit(self, percent: int, max_bytes: int) -> None:
        """The limit in force (the live settings); a change is looked at once."""
        if (percent, max_bytes) != (self.percent, self.max_bytes):
            self.percent, self.max_bytes = percent, max_bytes
            self.changed()

    def attach(self, send: Send | None) -> None:
        """Reports go to this stream from now on (None while disconnected); the first at once."""
        self._send = send
        if send is not None:
            self.changed()

    def changed(self) -> None:
        """Something may have changed the cache or who uses it: look again soon."""
        self._dirty.set()

    # -- the loop -----------------------------------------------------------------

    async def run(self) -> None:
        """Look whenever told to, at most once per ``report_every_s``, until cancelled."""
        left = await asyncio.to_thread(cache.leftovers, self.cache_dir)
        for path in left:
            log.info("deleting %s, left by a removal cut short", path.name)
            await asyncio.to_thread(cache.purge, path)
        self.changed()  # the agent's start: evict what is over, say what is held
        try:
            while True:
                await self._dirty.wait()
                self._dirty.clear()
                try:
                    await self.settle()
                except OSError as e:
                    # A cache unreadable this once (a disk gone read-only) must not end the agent.
                    log.warning("could not look at the weights cache %s: %s", self.cache_dir, e)
                await asyncio.sleep(self.report_every_s)
        finally:
            for task in self._purges:
                task.cancel()

    async def settle(self) -> WeightsReport:
        """Look at the cache once: mark last uses, evict past the limit, report."""
        async with self._lock:
            entries = await asyncio.to_thread(cache.scan, self.cache_dir)
            await self._mark_uses(entries)
            limit = await self._limit()
            held = len(entries)
            entries = await self._evict(entries, limit)
            if len(entries) < held:
                limit = await self._limit()  # the disk has more free now
            report = self._report(entries, limit)
            self.last_report = report
            if self._send is not None:
                self._send(AgentMessage(weights=report))
                self._evicted = []
            return report

    async def _limit(self) -> Limit:
        return await asyncio.to_thread(
            cache.cache_limit, self.cache_dir, self.percent, self.max_bytes
        )

    async def _mark_uses(self, entries: list[Entry]) -> None:
        """Entries a shard started on or left since the last look were used now."""
        uses = self._uses()
        holders: dict[str, frozenset[str]] = {}
        for e in entries:
            held_by = frozenset(u.replica_id for u in uses if u.holds(e))
            if held_by:
                holders[e.key] = held_by
        none: frozenset[str] = frozenset()
        moved = {
            e.key for e in entries if holders.get(e.key, none) != self._holders.get(e.key, none)
        }
        self._holders = holders
        if not moved:
            return
        stamp = cache.now_ms()
        keys = {e.key for e in entries}

        def write() -> None:
            used = cache.read_last_used(self.cache_dir)
            # Entries gone (removed by hand) are forgotten.
            used = {k: v for k, v in used.items() if k in keys}
            used.update(dict.fromkeys(moved, stamp))
            cache.write_last_used(self.cache_dir, used)

        await asyncio.to_thread(write)
        for i, e in enumerate(entries):
            if e.key in moved:
                entries[i] = Entry(e.key, e.path, e.source, e.size_bytes, stamp, e.partial)

    async def _evict(self, entries: list[Entry], limit: Limit) -> list[Entry]:
        """Remove unused entries past the limit, oldest last use first; those left."""
        in_use = set(self._holders)
        plan, after = cache.plan_eviction(entries, in_use, limit.limit_bytes)
        gone: set[str] = set()
        for e in plan:
            # Looked at again just before: a shard may have started on it meanwhile
            # (its fetch found it whole). No await between this look and the rename.
            holders = [u.replica_id for u in self._uses() if u.holds(e)]
            if holders:
                after += e.size_bytes
                continue
            try:
                away = cache.detach(self.cache_dir, e)
            except OSError as err:
                log.warning("could not remove %s from the weights cache: %s", e.key, err)
                after += e.size_bytes
                continue
            gone.add(e.key)
            log.info(
                "removed %s (%s) from the weights cache: over its limit of %s, and unused",
                e.key,
                size_words(e.size_bytes),
                size_words(limit.limit_bytes),
            )
            self._evicted = [*self._evicted, f"{e.key} ({size_words(e.size_bytes)})"][
                -EVICTED_KEPT:
            ]
            await asyncio.to_thread(cache.purge, away)
        left = [e for e in entries if e.key not in gone]
        self._say_note(left, limit, after)
        return left

    def _say_note(self, left: list[Entry], limit: Limit, total: int) -> None:
        note = ""
        if total > limit.limit_bytes:
            keys = ", ".join(e.key for e in left if e.key in self._holders)
            note = (
                f"{size_words(total)} held, over its limit of {size_words(limit.limit_bytes)}: "
                f"what is left is in use ({keys}), so it stays"
            )
            if note != self._note_said:
                log.warning("weights cache: %s", note)
        self._note_said = note

    def _report(self, entries: list[Entry], limit: Limit) -> WeightsReport:
        return WeightsReport(
            entries=[
                CachedWeights(
                    key=e.key,
                    source=e.source,
                    size_bytes=e.size_bytes,
                    last_used_unix_ms=e.last_used_unix_ms,
                    used_by=sorted(self._holders.get(e.key, ())),
                    partial=e.partial,
                )
                for e in entries
            ],
            limit_bytes=limit.limit_bytes,
            total_bytes=sum(e.size_bytes for e in entries),
            evicted=list(self._evicted),
            disk_free_bytes=limit.disk_free_bytes,
            limit_percent=limit.percent,
            limit_max_bytes=limit.max_bytes,
            disk_total_bytes=limit.disk_total_bytes,
            note=self._note_said,
        )

    # -- RemoveWeights ------------------------------------------------------------

    async def remove(self, keys: list[str], unused: bool) -> list[str]:
        """Remove the entries ``keys`` name and, with ``unused``, every entry no shard uses.

        One line each, as the CommandAck carries them: "removed KEY BYTES" or
        "kept KEY: why". What was removed is deleted after the answer.
        """
        lines: list[str] = []
        async with self._lock:
            entries = await asyncio.to_thread(cache.scan, self.cache_dir)
            chosen: dict[str, Entry] = {}
            for name in keys:
                found = cache.match(entries, name)
                if not found:
                    lines.append(f"kept {name}: not in this node's weights cache")
                for e in found:
                    chosen.setdefault(e.key, e)
            uses = self._uses()
            if unused:
                for e in entries:
                    if not any(u.holds(e) for u in uses):
                        chosen.setdefault(e.key, e)
            for e in chosen.values():
                # No await from this look to the rename: no shard can start on it between.
                holders = sorted({u.replica_id for u in self._uses() if u.holds(e)})
                if holders:
                    lines.append(f"kept {e.key}: in use by replica {', '.join(holders)}")
                    continue
                try:
                    away = cache.detach(self.cache_dir, e)
                except OSError as err:
                    lines.append(f"kept {e.key}: could not be removed ({err.strerror or err})")
                    continue
                log.info("removed %s (%s) from the weights cache on request", e.key, e.size_bytes)
                lines.append(f"removed {e.key} {e.size_bytes}")
                task = asyncio.create_task(self._purge(away), name=f"purge-{e.key}")
                self._purges.add(task)
                task.add_done_callback(self._purges.discard)
        if not lines:
            lines.append("kept nothing: no entry is unused")
        self.changed()
        return lines

    async def _purge(self, path: Path) -> None:
        await asyncio.to_thread(cache.purge, path)
        self.changed()  # the disk has more free: say so
