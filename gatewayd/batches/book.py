"""The batch book: every batch's record, the running ones held in memory by the runner.

The HTTP API, the admin RPCs and the runner all go through it: it makes a
batch (checking the request as OpenAI does, and the project's caps), reads
and lists batches (a running one as the runner has it now, where this
control plane runs it), and cancels one. Every control plane has a book; the
leader's runner (``runner.py``) takes the batches in ``active`` forward, and
takes up from the store, every second, those made or cancelled on any other
control plane (``refresh``).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gatewayd.batches.files_api import size_words
from gatewayd.batches.objects import BATCH_ENDPOINTS, COMPLETION_WINDOWS, new_id
from gatewayd.store import Store
from gatewayd.store.batch_records import BatchRecord
from gatewayd.store.usage_records import UsageFields
from llmgw.config import BatchesConfig

# OpenAI's bounds on metadata: 16 pairs, keys of 64 characters, values of 512.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
# The runner reads the store's batches not yet ended this often (those made or
# cancelled on another control plane), and at once after one made or cancelled here.
REFRESH_S = 1.0
# Statuses a cancel may be asked in.
CANCELLABLE = ("validating", "in_progress")


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
    # Lines read from the input and not yet sent, in input order: a window of the
    # file (runner.py's READ_AHEAD_*), filled again as lines are answered.
    todo: collections.deque[Line] = field(default_factory=collections.deque)
    # custom_id of every line read and not yet answered (to write what never ran).
    open_ids: dict[int, str] = field(default_factory=dict)
    # The input being read (runner.RequestReader): set when the batch runs here.
    reader: object | None = None
    loaded: bool = False
    # Every line of the input has been read.
    exhausted: bool = False
    # The request bytes of the lines read and not yet answered.
    held_bytes: int = 0
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


def shown(rec: BatchRecord) -> BatchRecord:
    """The batch as a client sees it: one whose cancel was asked (on any control plane)
    and not yet taken up by the runner is cancelling already."""
    rec = rec.model_copy()
    if rec.cancel_requested_at is not None and rec.status in CANCELLABLE:
        rec.status, rec.cancelling_at = "cancelling", rec.cancel_requested_at
    return rec


def held_lines(b: Active) -> int:
    """Lines of the batch's input in memory now: to send, in flight, answered and not yet
    committed."""
    unsettled = len(b.unsettled[0]) if b.unsettled is not None else 0
    return len(b.todo) + b.in_flight + len(b.results) + unsettled


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
    def __init__(
        self,
        store: Store,
        cfg: BatchesConfig | None = None,
        *,
        runs_here: Callable[[], bool] = lambda: True,
    ) -> None:
        self._store = store
        self._cfg = cfg or BatchesConfig()
        # Whether this control plane's runner runs now (it leads): a batch made here is
        # then held at once; else the leader's runner takes it up from the store.
        self._runs_here = runs_here
        self.active: dict[str, Active] = {}
        # Set when there is something new for the runner (a batch, a cancel, an answer).
        self.wake = asyncio.Event()
        # The store is read again at the next refresh, not REFRESH_S later.
        self.dirty = True
        self._refreshed = 0.0

    async def load(self) -> None:
        """Take up, afresh, every batch not yet ended: at the start of a run, or when this
        control plane leads again (what it held before is stale: another led meanwhile)."""
        self.active.clear()
        self.dirty = True
        await self.refresh()
        self.wake.set()

    async def refresh(self) -> None:
        """Take up the batches made on any control plane and the cancels asked on any; let go
        of those another run ended. At most every REFRESH_S, or at once when ``dirty``."""
        now = time.monotonic()
        if not self.dirty and now - self._refreshed < REFRESH_S:
            return
        self.dirty, self._refreshed = False, now
        stored = await self._store.active_batches()
        for rec in stored:
            held = self.active.get(rec.batch_id)
            if held is None:
                held = self.active[rec.batch_id] = Active(rec)
            if rec.cancel_requested_at is not None and held.rec.status in CANCELLABLE:
                held.rec.status, held.rec.cancelling_at = "cancelling", rec.cancel_requested_at
                held.rec.cancel_requested_at = rec.cancel_requested_at
                await self._store.update_batch(held.rec)
                self.wake.set()
        ids = {rec.batch_id for rec in stored}
        for batch_id, held in list(self.active.items()):
            idle = not held.in_flight and not held.results and held.unsettled is None
            if batch_id not in ids and idle:
                # Ended by another run (one that took the lease meanwhile): not ours.
                self.active.pop(batch_id, None)

    async def _check_caps(self, project_id: str, input_bytes: int) -> None:
        """429 in OpenAI's shape when the project is at a cap of batches not yet ended."""
        count, queued = await self._store.project_batch_load(project_id)
        most = self._cfg.max_active_per_project
        if count >= most:
            raise BatchRefused(
                429,
                f"the project has {count} batches not yet ended, the most it may"
                f" (batches.max_active_per_project in server.yaml is {most}): wait for"
                " some to end or cancel some",
                code="too_many_batches",
            )
        cap = self._cfg.max_queued_bytes_per_project
        if queued + input_bytes > cap:
            raise BatchRefused(
                429,
                f"the project's batches not yet ended would queue {size_words(queued + input_bytes)}"
                f" of input, over its {size_words(cap)} cap"
                " (batches.max_queued_bytes_per_project in server.yaml): wait for some to end",
                param="input_file_id",
                code="batch_queue_full",
            )

    async def create(self, project_id: str, key_id: str, request: dict) -> BatchRecord:
        """A new batch of ``request`` (OpenAI's CreateBatchRequest); BatchRefused as OpenAI
        refuses at create, or 429 past the project's caps. The input file's lines are
        checked by the runner next."""
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
        await self._check_caps(project_id, f.bytes)
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
            input_bytes=f.bytes,
        )
        await self._store.create_batch(rec)
        if self._runs_here():
            self.active.setdefault(rec.batch_id, Active(rec.model_copy()))
        # Else the leader's runner takes it up from the store within REFRESH_S.
        self.dirty = True
        self.wake.set()
        return rec

    async def get(self, batch_id: str, project_id: str = "") -> BatchRecord | None:
        """The batch as it stands now (a running one as the runner has it); None when there
        is none, or it is another project's (``project_id`` "" for any)."""
        held = self.active.get(batch_id)
        rec = held.rec if held is not None else await self._store.get_batch(batch_id)
        if rec is None or (project_id and rec.project_id != project_id):
            return None
        return shown(rec)

    async def list(
        self, project_id: str = "", *, status: str = "", after: str = "", limit: int = 100
    ) -> list[BatchRecord]:
        recs = await self._store.list_batches(project_id, status=status, after=after, limit=limit)
        out = []
        for rec in recs:
            held = self.active.get(rec.batch_id)
            if held is not None and (not status or held.rec.status == status):
                rec = held.rec
            out.append(shown(rec))
        return out

    async def cancel(self, batch_id: str, project_id: str = "") -> BatchRecord:
        """Stop sending the batch's requests; it is ``cancelled`` once those in flight are
        answered. Asked on any control plane: the store carries it to the runner.
        Cancelling one already cancelling or cancelled changes nothing."""
        rec = await self.get(batch_id, project_id)
        if rec is None:
            raise BatchRefused(404, f"no batch {batch_id!r}", code="batch_not_found")
        if rec.status in ("cancelling", "cancelled"):
            return rec
        if rec.status not in CANCELLABLE:
            raise _not_cancellable(batch_id, rec.status)
        at = _now()
        if not await self._store.request_batch_cancel(batch_id, at):
            # It moved on meanwhile (ended, or asked to cancel elsewhere): as it is now.
            stored = await self._store.get_batch(batch_id)
            now = shown(stored) if stored is not None else rec
            if now.status in ("cancelling", "cancelled"):
                return now
            raise _not_cancellable(batch_id, now.status)
        held = self.active.get(batch_id)
        if held is not None and held.rec.status in CANCELLABLE:
            held.rec.status, held.rec.cancelling_at = "cancelling", at
            held.rec.cancel_requested_at = at
            await self._store.update_batch(held.rec)
        self.dirty = True
        self.wake.set()
        rec.status, rec.cancelling_at, rec.cancel_requested_at = "cancelling", at, at
        return rec.model_copy() if held is None else held.rec.model_copy()


def _not_cancellable(batch_id: str, status: str) -> BatchRefused:
    return BatchRefused(
        409,
        f"the batch {batch_id} is {status}: only a validating or in-progress batch"
        " can be cancelled",
        code="batch_not_cancellable",
    )
