"""Accounting of MCP tool calls: a row per call in the store, and Prometheus series.

``McpCallWriter.add`` runs once per ``tools/call``: it appends to a buffer and
returns, never awaiting the store; ``run`` writes the buffer about once a
second, one store call (one transaction) per batch. Through a store outage
the rows wait in memory up to ``max_rows``, the oldest going first, counted
and logged. It is the usage writer's discipline
(``gatewayd.gateway.metering.usage``) for another table: that writer is bound
to ``record_usage`` and its rows.

With a journal (gatewayd's: ``mcp-journal/`` beside the usage journal, the
same ``UsageJournal`` given this row kind), ``add`` appends the row there and
returns the future of its durability, which the endpoint awaits before the
answer goes out; ``flush`` reads the rows back in order. A call answered just
before a kill -9 is then replayed at the next start and stored once by its
row id, and a store outage keeps rows on disk rather than in memory.

``McpMetrics`` counts calls by server, tool and how they ended, and times
them by server. Label values come from the registry only: a server or tool
a caller makes up is "unknown", so no call can grow the number of series.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram

from gatewayd.store import Store
from gatewayd.store.mcp_records import CALL_STATUSES, McpCallRow
from llmgw.errors import StoreError

if TYPE_CHECKING:
    from gatewayd.gateway.metering.journal import UsageJournal

log = logging.getLogger(__name__)

# 1 s: `llmgw ctl mcp usage` right after a call sees it, and 500 calls/s make
# one transaction of ~500 rows instead of 500.
FLUSH_INTERVAL_S = 1.0
# ~100k rows of ~200 bytes: ~20 MB, minutes of a busy gateway kept through a
# store outage before the oldest are dropped.
MAX_BUFFERED_ROWS = 100_000
# Rows per transaction when a backlog is written: a SQLite writer holds the
# store's one connection for the whole transaction.
MAX_ROWS_PER_WRITE = 10_000

# Seconds. An instant tool through the gateway takes about a millisecond, so
# the buckets start at a tenth of one; a slow tool may take the whole 30 s
# default timeout, or the minutes a server's --timeout allows.
CALL_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
)

UNKNOWN = "unknown"
_STATUSES = frozenset(CALL_STATUSES)
_CALL_FIELDS = tuple(f.name for f in dataclasses.fields(McpCallRow))


def encode_call(row: McpCallRow) -> bytes:
    """A call row as one JSON line of the MCP call journal."""
    d = {name: getattr(row, name) for name in _CALL_FIELDS}
    d["at"] = row.at.isoformat()
    return json.dumps(d, separators=(",", ":")).encode() + b"\n"


def decode_call(line: bytes) -> McpCallRow:
    d = json.loads(line)
    d["at"] = datetime.fromisoformat(d["at"])
    return McpCallRow(**{k: v for k, v in d.items() if k in _CALL_FIELDS})


class McpCallWriter:
    """Buffers MCP call rows and writes them to the store in batches."""

    def __init__(
        self,
        store: Store,
        interval_s: float = FLUSH_INTERVAL_S,
        *,
        max_rows: int = MAX_BUFFERED_ROWS,
        rows_per_write: int = MAX_ROWS_PER_WRITE,
        journal: UsageJournal | None = None,
    ) -> None:
        self._store = store
        self.journal = journal
        self._interval_s = interval_s
        self._max_rows = max_rows
        self._rows_per_write = rows_per_write
        self._buffer: collections.deque[McpCallRow] = collections.deque()
        # One flush at a time: run() and close() may overlap.
        self._flushing = asyncio.Lock()
        self.dropped = 0  # rows lost to the bound since start
        self._dropped_unreported = 0

    def __len__(self) -> int:
        """Rows waiting to be written."""
        return len(self._buffer)

    def add(self, row: McpCallRow) -> asyncio.Future | None:
        """Keep a row for the next write. O(1); never waits for the store.

        With a journal: the future of the row's durability (True once on disk), which
        the endpoint awaits before the answer goes out; None without one."""
        if self.journal is not None:
            if not row.row_id:
                row = dataclasses.replace(row, row_id=self.journal.next_row_id())
            return self.journal.append(row)
        if len(self._buffer) >= self._max_rows:
            self._buffer.popleft()
            self.dropped += 1
            self._dropped_unreported += 1
        self._buffer.append(row)
        return None

    async def flush(self) -> int:
        """Write what is buffered; the number of rows written.

        On a StoreError the rows not written stay buffered (oldest first,
        within the bound) and the error is raised. Rows the store refuses for
        being malformed are dropped with the error logged: retried, they
        would stop every later row too.
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
                    await self._store.record_mcp_calls(batch)
                except StoreError:
                    self._put_back(batch)
                    raise
                except Exception:
                    log.exception("dropped %d MCP call rows the store could not take", len(batch))
                    continue
                written += n
            return written

    async def _flush_journal(self, journal: UsageJournal) -> int:
        # The journal is the queue: a StoreError leaves its mark where it was, so the
        # same rows are read again, in order, on the next try (and stored once).
        written = 0
        while True:
            rows, mark = await journal.read(self._rows_per_write)
            if rows:
                try:
                    await self._store.record_mcp_calls(rows)
                except StoreError:
                    raise
                except Exception:
                    log.exception("dropped %d MCP call rows the store could not take", len(rows))
                else:
                    written += len(rows)
            if mark == journal.mark and not rows:
                return written
            journal.consumed(mark)

    def _put_back(self, batch: list[McpCallRow]) -> None:
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
                "dropped the %d oldest MCP call rows: the store took none for a while"
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
            kept = (
                "in the MCP call journal" if self.journal is not None else f"{len(self)} in memory"
            )
            log.warning("MCP calls not written, rows kept %s for the next try: %s", kept, e)

    async def close(self) -> None:
        """Write what is left; rows the store cannot take now are reported lost
        (without a journal: with one they wait on disk for the next start)."""
        try:
            if self.journal is not None:
                await self.journal.sync()
            await self.flush()
        except StoreError as e:
            if self.journal is None:
                log.error("lost %d MCP call rows at shutdown: %s", len(self._buffer), e)
                self._buffer.clear()
            else:
                log.warning("MCP call rows left in the journal for the next start: %s", e)
        if self.journal is not None:
            await self.journal.close()


class McpMetrics:
    """``llmgw_mcp_calls_total{server,tool,status}`` and ``llmgw_mcp_call_seconds{server}``.

    ``known(server, tool)`` says whether a pair is the registry's (a server
    it holds, or ``llmgw:admin``, and a tool it serves); ``known(server, "")``
    asks about the server alone. A known server with a made-up tool is
    counted as (server, "unknown"), anything else as ("unknown", "unknown").
    The labelled children a call touches are kept once found: ``.labels()``
    hashes and locks on every call.
    """

    def __init__(self, registry: CollectorRegistry, known: Callable[[str, str], bool]) -> None:
        self._known = known
        self._by_call: dict[tuple[str, str, str], tuple] = {}
        self.calls = Counter(
            "llmgw_mcp_calls",
            "tools/call requests through /mcp, by server, tool and how they ended",
            ["server", "tool", "status"],
            registry=registry,
        )
        self.seconds = Histogram(
            "llmgw_mcp_call_seconds",
            "Time to answer a tools/call through /mcp, the server's time included",
            ["server"],
            buckets=CALL_BUCKETS,
            registry=registry,
        )

    def labels(self, server: str, tool: str) -> tuple[str, str]:
        """The label values a call is counted under: the registry's names, or "unknown"."""
        if server and tool and self._known(server, tool):
            return server, tool
        if server and self._known(server, ""):
            return server, UNKNOWN
        return UNKNOWN, UNKNOWN

    def observe(self, server: str, tool: str, status: str, seconds: float) -> None:
        """Count one call; ``status`` is one of the store's CALL_STATUSES."""
        server_label, tool_label = self.labels(server, tool)
        if status not in _STATUSES:
            status = UNKNOWN  # a slip of ours must not grow the series either
        key = (server_label, tool_label, status)
        series = self._by_call.get(key)
        if series is None:
            series = self._by_call[key] = (
                self.calls.labels(server_label, tool_label, status),
                self.seconds.labels(server_label),
            )
        series[0].inc()
        series[1].observe(seconds)
