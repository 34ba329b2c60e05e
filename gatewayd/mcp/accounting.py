"""Accounting of MCP tool calls: a row per call in the store, and Prometheus series.

``McpCallWriter.add`` runs once per ``tools/call``; the rows go to the store
as ``gatewayd.gateway.metering.batches`` writes usage rows too: buffered or
journaled, a transaction a batch, kept through a store outage.

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
import dataclasses
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram

from gatewayd.gateway.metering.batches import BatchWriter
from gatewayd.store import Store
from gatewayd.store.mcp_records import CALL_STATUSES, McpCallRow

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


class McpCallWriter(BatchWriter[McpCallRow]):
    """Buffers MCP call rows (or journals them) and writes them to the store in batches."""

    rows_are = "MCP call rows"

    def __init__(
        self,
        store: Store,
        interval_s: float = FLUSH_INTERVAL_S,
        *,
        max_rows: int = MAX_BUFFERED_ROWS,
        rows_per_write: int = MAX_ROWS_PER_WRITE,
        journal: UsageJournal | None = None,
    ) -> None:
        super().__init__(
            lambda rows: store.record_mcp_calls(rows),
            interval_s=interval_s,
            max_rows=max_rows,
            rows_per_write=rows_per_write,
            journal=journal,
            log=log,
        )

    def add(self, row: McpCallRow) -> asyncio.Future | None:
        """As ``BatchWriter.add``; a journaled row gets its id here (the store keeps it once)."""
        if self.journal is not None and not row.row_id:
            row = dataclasses.replace(row, row_id=self.journal.next_row_id())
        return super().add(row)


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
