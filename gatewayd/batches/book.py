"""The batch book: every batch's record, the running ones held in memory.

The HTTP API, the admin RPCs and the runner all go through it: it makes a
batch (checking the request as OpenAI does), reads and lists batches (a running
one as the runner has it now), and cancels one. The runner (``runner.py``)
takes the batches it holds in ``active`` forward.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gatewayd.batches.objects import BATCH_ENDPOINTS, COMPLETION_WINDOWS, new_id
from gatewayd.store import Store
from gatewayd.store.batch_records import ACTIVE_STATUSES, BatchRecord
from gatewayd.store.usage_records import UsageFields

# OpenAI's bounds on metadata: 16 pairs, keys of 64 characters, values of 512.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512


class BatchRefused(Exception):
    """A batch request refused: ``status`` is the HTTP status it answers with."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str = ""):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


@dataclass(slots=True)
class Line:
    """One request of a batch's input file, not yet answered."""

    line: int  # 0-based
    custom_id: str
    body: bytes
    model: str = ""
    attempts: int = 0


@dataclass(slots=True)
class Result:
    """One answered line, waiting to be committed with its usage row."""

    line: int
    ok: bool
    # The JSONL line (with its newline) for the output file (ok) or the error file.
    text: bytes
    usage: UsageFields | None = None


@dataclass
class Active:
    """A batch the runner still has to take forward."""

    rec: BatchRecord
    # Lines to send, in input order; filled when the input file is read.
    todo: collections.deque[Line] = field(default_factory=collections.deque)
    # custom_id of every line not yet answered (to write what never ran).
    open_ids: dict[int, str] = field(default_factory=dict)
    loaded: bool = False
    in_flight: int = 0
    results: list[Result] = field(default_factory=list)
    # A commit whose outcome is not known yet (the store failed as it answered):
    # (its results, its progress), read back before anything else is committed.
    unsettled: tuple[list[Result], object] | None = None
    # Backing off after replicas had no room (monotonic time, seconds).
    not_before: float = 0.0
    backoff_s: float = 0.0


def _now() -> datetime:
    return datetime.now(UTC)


def check_metadata(value) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BatchRefused(400, "metadata must be an object of strings", param="metadata")
    if len(value) > MAX_METADATA_PAIRS:
        raise BatchRefused(
            400, f"metadata may hold at most {MAX_METADATA_PAIRS} pairs", param="metadata"
        )
    for k, v in value.items():
        if len(k) > MAX_METADATA_KEY or len(v) > MAX_METADATA_VALUE:
            raise BatchRefused(
                400,
                f"metadata keys are at most {MAX_METADATA_KEY} characters and values"
                f" at most {MAX_METADATA_VALUE}",
                param="metadata",
            )
    return dict(value)


class BatchBook:
    def __init__(self, store: Store) -> None:
        self._store = store
        self.active: dict[str, Active] = {}
        # Set when there is something new for the runner (a batch, a cancel, an answer).
        self.wake = asyncio.Event()

    async def load(self) -> None:
        """Take up the batches a previous run left unfinished."""
        for rec in await self._store.active_batches():
            self.active.setdefault(rec.batch_id, Active(rec))
        self.wake.set()

    async def create(self, project_id: str, key_id: str, request: dict) -> BatchRecord:
        """A new batch of ``request`` (OpenAI's CreateBatchRequest); BatchRefused as OpenAI
        refuses at create. The input file's lines are checked by the runner next."""
        if not isinstance(request, dict):
            raise BatchRefused(400, "the body must be a JSON object")
        file_id = request.get("input_file_id")
        if not isinstance(file_id, str) or not file_id:
            raise BatchRefused(400, "input_file_id is required", param="input_file_id")
        endpoint = request.get("endpoint")
        if endpoint not in BATCH_ENDPOINTS:
            raise BatchRefused(
                400,
                f"endpoint {endpoint!r} is not one a batch can use: " + ", ".join(BATCH_ENDPOINTS),
                param="endpoint",
            )
        window = request.get("completion_window")
        if window not in COMPLETION_WINDOWS:
            raise BatchRefused(
                400,
                f"completion_window {window!r} is not supported: use 24h",
                param="completion_window",
            )
        metadata = check_metadata(request.get("metadata"))
        f = await self._store.get_file(file_id)
        if f is None or f.project_id != project_id:
            raise BatchRefused(
                404, f"no file {file_id!r}", param="input_file_id", code="file_not_found"
            )
        if f.purpose != "batch":
            raise BatchRefused(
                400,
                f"the file {file_id!r} was uploaded with purpose {f.purpose!r}; a batch's input"
                " must be uploaded with purpose batch",
                param="input_file_id",
            )
        now = _now()
        rec = BatchRecord(
            batch_id=new_id("batch_"),
            project_id=project_id,
            project=f.project,
            key_id=key_id,
            endpoint=endpoint,
            status="validating",
            input_file_id=file_id,
            completion_window=window,
            created_at=now,
            expires_at=now + timedelta(seconds=COMPLETION_WINDOWS[window]),
            metadata=metadata,
        )
        await self._store.create_batch(rec)
        self.active[rec.batch_id] = Active(rec)
        self.wake.set()
        return rec

    async def get(self, batch_id: str, project_id: str = "") -> BatchRecord | None:
        """The batch as it stands now (a running one as the runner has it); None when there
        is none, or it is another project's (``project_id`` "" for any)."""
        held = self.active.get(batch_id)
        rec = held.rec if held is not None else await self._store.get_batch(batch_id)
        if rec is None or (project_id and rec.project_id != project_id):
            return None
        return rec.model_copy()

    async def list(
        self, project_id: str = "", *, status: str = "", after: str = "", limit: int = 100
    ) -> list[BatchRecord]:
        recs = await self._store.list_batches(project_id, status=status, after=after, limit=limit)
        out = []
        for rec in recs:
            held = self.active.get(rec.batch_id)
            if held is not None and (not status or held.rec.status == status):
                rec = held.rec.model_copy()
            out.append(rec)
        return out

    async def cancel(self, batch_id: str, project_id: str = "") -> BatchRecord:
        """Stop sending the batch's requests; it is ``cancelled`` once those in flight are
        answered. Cancelling one already cancelling or cancelled changes nothing."""
        rec = await self.get(batch_id, project_id)
        if rec is None:
            raise BatchRefused(404, f"no batch {batch_id!r}", code="batch_not_found")
        held = self.active.get(batch_id)
        if rec.status in ("cancelling", "cancelled"):
            return rec
        if held is None or rec.status not in ACTIVE_STATUSES or rec.status == "finalizing":
            raise BatchRefused(
                409,
                f"the batch {batch_id} is {rec.status}: only a validating or in-progress batch"
                " can be cancelled",
                code="batch_not_cancellable",
            )
        held.rec.status, held.rec.cancelling_at = "cancelling", _now()
        await self._store.update_batch(held.rec)
        self.wake.set()
        return held.rec.model_copy()
