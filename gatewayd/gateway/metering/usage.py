"""Usage accounting on the hot path: a row per request, written in batches.

The gateway calls ``UsageWriter.add`` once per answered request; the rows go
to the store as ``metering.batches`` writes every kind of row: buffered or
journaled (gatewayd's ``UsageJournal``), a transaction a batch, kept through a
store outage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gatewayd.gateway.metering.batches import BatchWriter
from gatewayd.store import Store

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
    # The project's path (Org/team/project) as the key had it, and its id: reports
    # show the row under the id's path now, wherever the project was renamed to.
    project: str
    project_id: str = ""
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


class UsageWriter(BatchWriter[UsageRow]):
    """Buffers usage rows (or journals them) and writes them to the store in batches."""

    rows_are = "usage rows"

    def __init__(
        self,
        store: Store,
        *,
        interval_s: float = FLUSH_INTERVAL_S,
        max_rows: int = MAX_BUFFERED_ROWS,
        rows_per_write: int = MAX_ROWS_PER_WRITE,
        journal: UsageJournal | None = None,
    ) -> None:
        super().__init__(
            lambda rows: store.record_usage(rows),
            interval_s=interval_s,
            max_rows=max_rows,
            rows_per_write=rows_per_write,
            journal=journal,
            log=log,
        )
