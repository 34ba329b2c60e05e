"""Accounting of MCP tool calls: a row per call in the store, and Prometheus series.

``McpCallWriter.add`` runs once per ``tools/call``: it appends to a buffer and
returns, never awaiting the store; ``run`` writes the buffer about once a
second, one store call (one transaction) per batch. Through a store outage
the rows wait in memory up to ``max_rows``, the oldest going first, counted
and logged. It is the usage writer's discipline
(``gatewayd.gateway.metering.usage``) for another table: that writer is bound
to ``record_usage`` and its rows.

``McpMetrics`` counts calls by server, tool and how they ended, and times
them by server. Label values come from the registry only: a server or tool
a caller makes up is "unknown", so no call can grow the number of series.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from gatewayd.store import Store
from gatewayd.store.mcp_records import CALL_STATUSES, McpCallRow
from llmgw.errors import StoreError

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


class McpCallWriter:
    """Buffers MCP call rows and writes them to the store in batches."""

    def __init__(
        self,
        store: Store,
        interval_s: float = FLUSH_INTERVAL_S,
        *,
        max_rows: int = MAX_BUFFERED_ROWS,
        rows_per_write: int = MAX_ROWS_PER_WRITE,
    ) -> None:
        self._store = store
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

    def add(self, row: McpCallRow) -> None:
        """Keep a row for the next write. O(1); never waits for the store."""
        if len(self._buffer) >= self._max_rows:
            self._buffer.popleft()
            self.dropped += 1
            self._dropped_unreported += 1
        self._buffer.append(row)

    async def flush(self) -> int:
        """Write what is buffered; the number of rows written.

        On a StoreError the rows not written stay buffered (oldest first,
        within the bound) and the error is raised. Rows the store refuses for
        being malformed are dropped with the error logged: retried, they
        would stop every later row too.
        """
        async with self._flushing:
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
            log.warning(
                "MCP calls not written, %d rows kept in memory for the next try: %s",
                len(self._buffer),
                e,
            )

    async def close(self) -> None:
        """Write what is left; rows the store cannot take now are reported lost."""
        try:
            await self.flush()
        except StoreError as e:
            log.error("lost %d MCP call rows at shutdown: %s", len(self._buffer), e)
            self._buffer.clear()


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
