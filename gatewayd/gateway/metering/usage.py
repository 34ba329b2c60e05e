"""Usage accounting on the hot path: a row per request, written in batches.

The gateway calls ``UsageWriter.add`` once per answered request: it appends
to a buffer and returns, never awaiting the store. ``run`` writes the buffer
about once a second, in one store call (one transaction) per batch. When the
store is down the rows wait in memory, up to ``max_rows``; past that the
oldest go first, and how many went is logged.

With a ``UsageJournal`` (gatewayd's), ``add`` appends the row to the journal
instead and returns the future of its durability; ``flush`` reads the rows
back from the journal in order and tells it which the store has, so rows
outlive a kill -9 and wait out a store outage on disk, not in memory.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gatewayd.store import Store
from llmgw.errors import StoreError

if TYPE_CHECKING:
    from gatewayd.gateway.metering.journal import UsageJournal

log = logging.getLogger(__name__)

# 1 s: recent enough for `llmgw ctl usage` right after a request, and at 500
# req/s a batch of ~500 rows — one transaction instead of 500.
FLUSH_INTERVAL_S = 1.0
# ~100k rows of a few hundred bytes: tens of MB, minutes of a busy gateway's
# traffic kept through a store outage before the oldest are dropped.
MAX_BUFFERED_ROWS = 100_000
# Rows per transaction when a backlog is written after an outage: a SQLite
# writer holds the store's one connection for the whole transaction.
MAX_ROWS_PER_WRITE = 10_000


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True, kw_only=True)
class UsageRow:
    """One request's usage: counts, times and names, never its text."""

    key_id: str
    # The project's path: Org/team/project.
    project: str
    # The model asked for, and the one that answered.
    model: str
    served_model: str = ""
    # A replica id, or the name of an outside endpoint.
    replica: str = ""
    # cached_tokens are counted within prompt_tokens, as OpenAI's usage counts them.
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_micros: int = 0
    latency_ms: float = 0.0
    # None: no first token came (an error, or an answer not streamed).
    ttft_ms: float | None = None
    # The HTTP status the client got.
    status: int = 200
    profile: str = ""
    # The batch the request was part of (OpenAI's Batch API); "" for a client's own.
    batch_id: str = ""
    at: datetime = field(default_factory=_now)
    # Unique per row, given by the journal: the store keeps a row id once, so a
    # row replayed after a crash is not counted twice. "" for rows never journaled.
    row_id: str = ""


class UsageWriter:
    """Buffers usage rows and writes them to the store in batches."""

    def __init__(
        self,
        store: Store,
        *,
        interval_s: float = FLUSH_INTERVAL_S,
        max_rows: int = MAX_BUFFERED_ROWS,
        rows_per_write: int = MAX_ROWS_PER_WRITE,
        journal: UsageJournal | None = None,
    ) -> None:
        self._store = store
        self.journal = journal
        self._interval_s = interval_s
        self._max_rows = max_rows
        self._rows_per_write = rows_per_write
        self._buffer: collections.deque[UsageRow] = collections.deque()
        # One flush at a time: run() and close() (or an admin call) may overlap.
        self._flushing = asyncio.Lock()
        self.dropped = 0  # rows lost to the bound since start
        self._dropped_unreported = 0

    def __len__(self) -> int:
        """Rows waiting to be written."""
        return len(self._buffer)

    def add(self, row: UsageRow) -> asyncio.Future | None:
        """Keep a row for the next write. O(1); never waits for the store.

        With a journal: the future of the row's durability (True once on disk), which
        the gateway awaits before the answer's last bytes; None without one."""
        if self.journal is not None:
            return self.journal.append(row)
        if len(self._buffer) >= self._max_rows:
            self._buffer.popleft()
            self.dropped += 1
            self._dropped_unreported += 1
        self._buffer.append(row)
        return None

    async def flush(self) -> int:
        """Write what is buffered; the number of rows written.

        On a StoreError the rows not written stay buffered (oldest first, within
        the bound) and the error is raised. Rows the store refuses for being
        malformed are dropped with the error logged: retrying them would stop
        every later row too.
        """
        async with self._flushing:
            if self.journal is not None:
                return await self._flush_journal(self.journal)
            self._report_drops()
            written = 0
            while self._buffer:
                n = min(len(self._buffer), self._rows_per_write)
                batch = [self._buffer.popleft() for _ in range(n)]
                try:
                    await self._store.record_usage(batch)
                except StoreError:
                    self._put_back(batch)
                    raise
                except Exception:
                    log.exception("dropped %d usage rows the store could not take", len(batch))
                    continue
                written += n
            return written

    async def _flush_journal(self, journal: UsageJournal) -> int:
        # The journal is the queue: a StoreError leaves its mark where it was, so the
        # same rows are read again, in order, on the next try.
        written = 0
        while True:
            rows, mark = await journal.read(self._rows_per_write)
            if rows:
                try:
                    await self._store.record_usage(rows)
                except StoreError:
                    raise
                except Exception:
                    log.exception("dropped %d usage rows the store could not take", len(rows))
                else:
                    written += len(rows)
            if mark == journal.mark and not rows:
                return written
            journal.consumed(mark)

    def _put_back(self, batch: list[UsageRow]) -> None:
        # Rows added while the write was in flight are newer: they go after.
        rows = batch + list(self._buffer)
        over = len(rows) - self._max_rows
        if over > 0:
            rows = rows[over:]
            self.dropped += over
            self._dropped_unreported += over
        self._buffer = collections.deque(rows)

    def _report_drops(self) -> None:
        if self._dropped_unreported:
            log.warning(
                "dropped the %d oldest usage rows: the store took none for a while"
                " and at most %d are kept in memory",
                self._dropped_unreported,
                self._max_rows,
            )
            self._dropped_unreported = 0

    async def run(self) -> None:
        """Write the buffer every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(self._interval_s)
            # Shielded: a stop arriving mid-write lets that write finish (close()
            # waits for it) rather than losing, or writing twice, the batch in flight.
            await asyncio.shield(self._flush_or_keep())

    async def _flush_or_keep(self) -> None:
        try:
            await self.flush()
        except StoreError as e:
            kept = "in the usage journal" if self.journal is not None else f"{len(self)} in memory"
            log.warning("usage not written, rows kept %s for the next try: %s", kept, e)

    async def close(self) -> None:
        """Write what is left; rows the store cannot take now are reported lost
        (without a journal: with one they wait on disk for the next start)."""
        try:
            if self.journal is not None:
                await self.journal.sync()
            await self.flush()
        except StoreError as e:
            if self.journal is None:
                log.error("lost %d usage rows at shutdown: %s", len(self._buffer), e)
                self._buffer.clear()
            else:
                log.warning("usage rows left in the journal for the next start: %s", e)
        if self.journal is not None:
            await self.journal.close()
