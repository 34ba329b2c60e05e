"""The discipline every per-request row follows to the store: buffered, written in batches.

``add`` runs on the hot path: it appends to a buffer and returns, never awaiting
the store. ``run`` writes the buffer about once a second, one store call (one
transaction) per batch. When the store is down the rows wait in memory, up to
``max_rows``; past that the oldest go first, and how many went is logged.

With a journal, ``add`` appends the row to the journal instead and returns the
future of its durability; ``flush`` reads the rows back from the journal in
order and tells it which the store has, so rows outlive a kill -9 and wait out
a store outage on disk, not in memory.

Usage rows (``metering.usage``) and MCP call rows (``gatewayd.mcp.accounting``)
are its two kinds: each names its store call and the words for its rows.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from llmgw.errors import StoreError

if TYPE_CHECKING:
    from gatewayd.gateway.metering.journal import UsageJournal

log = logging.getLogger(__name__)

Row = TypeVar("Row")


class BatchWriter(Generic[Row]):
    """Buffers rows (or journals them) and writes them to the store in batches."""

    # "usage rows", "MCP call rows": what the log lines call the rows.
    rows_are: str = "rows"

    def __init__(
        self,
        record: Callable[[list[Row]], Awaitable[object]],
        *,
        interval_s: float,
        max_rows: int,
        rows_per_write: int,
        journal: UsageJournal | None,
        log: logging.Logger = log,
    ) -> None:
        self._record = record
        self.journal = journal
        self._interval_s = interval_s
        self._max_rows = max_rows
        self._rows_per_write = rows_per_write
        self._log = log
        self._buffer: collections.deque[Row] = collections.deque()
        # One flush at a time: run() and close() (or an admin call) may overlap.
        self._flushing = asyncio.Lock()
        self.dropped = 0  # rows lost to the bound since start
        self._dropped_unreported = 0

    def __len__(self) -> int:
        """Rows waiting to be written."""
        return len(self._buffer)

    def add(self, row: Row) -> asyncio.Future | None:
        """Keep a row for the next write. O(1); never waits for the store.

        With a journal: the future of the row's durability (True once on disk), which
        the caller awaits before its answer's last bytes go out; None without one."""
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
                if await self._write(batch, on_store_error=self._put_back):
                    written += n
            return written

    async def _write(
        self, rows: list[Row], on_store_error: Callable[[list[Row]], None] | None = None
    ) -> bool:
        """Write one batch: True when stored, False when dropped as malformed."""
        logger = self._log
        try:
            await self._record(rows)
        except StoreError:
            if on_store_error is not None:
                on_store_error(rows)
            raise
        except Exception:
            logger.exception("dropped %d %s the store could not take", len(rows), self.rows_are)
            return False
        return True

    async def _flush_journal(self, journal: UsageJournal) -> int:
        # The journal is the queue: a StoreError leaves its mark where it was, so the
        # same rows are read again, in order, on the next try (and stored once).
        written = 0
        while True:
            rows, mark = await journal.read(self._rows_per_write)
            if rows and await self._write(rows):
                written += len(rows)
            if mark == journal.mark and not rows:
                return written
            journal.consumed(mark)

    def _put_back(self, batch: list[Row]) -> None:
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
            self._log.warning(
                "dropped the %d oldest %s: the store took none for a while"
                " and at most %d are kept in memory",
                self._dropped_unreported,
                self.rows_are,
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
            kept = "in their journal" if self.journal is not None else f"{len(self)} in memory"
            self._log.warning(
                "%s not written, kept %s for the next try: %s", self.rows_are, kept, e
            )

    async def close(self) -> None:
        """Write what is left; rows the store cannot take now are reported lost
        (without a journal: with one they wait on disk for the next start)."""
        try:
            if self.journal is not None:
                await self.journal.sync()
            await self.flush()
        except StoreError as e:
            if self.journal is None:
                self._log.error("lost %d %s at shutdown: %s", len(self._buffer), self.rows_are, e)
                self._buffer.clear()
            else:
                self._log.warning("%s left in the journal for the next start: %s", self.rows_are, e)
        if self.journal is not None:
            await self.journal.close()
