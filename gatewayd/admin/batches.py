"""Admin RPCs for batches (OpenAI's Batch API): list, show and cancel, any project's."""

from __future__ import annotations

from datetime import UTC, datetime

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.batches.book import BatchBook, BatchRefused
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.store.batch_records import BATCH_STATUSES, BatchRecord
from proto.llmgw.v1 import (
    BatchCounts,
    BatchView,
    GetBatchRequest,
    ListBatchesReply,
    ListBatchesRequest,
)

DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000


def _iso(t: datetime | None) -> str:
    return "" if t is None else t.astimezone(UTC).isoformat(timespec="seconds")


def batch_view(rec: BatchRecord, project: str = "") -> BatchView:
    """The batch as the admin API shows it; ``project``: its project's path now."""
    return BatchView(
        id=rec.batch_id,
        project=project or rec.project,
        key_id=rec.key_id,
        endpoint=rec.endpoint,
        status=rec.status,
        input_file_id=rec.input_file_id,
        output_file_id=rec.output_file_id,
        error_file_id=rec.error_file_id,
        completion_window=rec.completion_window,
        created_at=_iso(rec.created_at),
        in_progress_at=_iso(rec.in_progress_at),
        finalizing_at=_iso(rec.finalizing_at),
        completed_at=_iso(rec.completed_at),
        failed_at=_iso(rec.failed_at),
        expired_at=_iso(rec.expired_at),
        cancelling_at=_iso(rec.cancelling_at),
        cancelled_at=_iso(rec.cancelled_at),
        expires_at=_iso(rec.expires_at),
        request_counts=BatchCounts(total=rec.total, completed=rec.completed, failed=rec.failed),
        metadata=dict(rec.metadata),
        errors=[_error_line(e) for e in rec.errors],
        models=list(rec.models),
    )


def _error_line(e: dict) -> str:
    where = f"line {e['line']}: " if e.get("line") is not None else ""
    return f"{where}{e.get('message', '')} ({e.get('code', '')})"


class BatchAdmin:
    """Mixed into AdminService."""

    _batches: BatchBook | None
    _keys: KeyCache

    def _view(self, rec: BatchRecord) -> BatchView:
        # The path now: a batch held by the runner keeps the one it was read with.
        return batch_view(rec, self._keys.tenancy.path_of(rec.project_id, rec.project))

    def _book(self) -> BatchBook:
        if self._batches is None:
            raise GRPCError(Status.UNAVAILABLE, "this control plane runs no batches")
        return self._batches

    async def list_batches(self, message: ListBatchesRequest) -> ListBatchesReply:
        if message.status and message.status not in BATCH_STATUSES:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"status {message.status!r} is not one of: " + ", ".join(BATCH_STATUSES),
            )
        if message.limit < 0:
            raise GRPCError(Status.INVALID_ARGUMENT, "limit must be 0 (the default) or more")
        limit = min(message.limit or DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)
        book = self._book()
        if message.project:
            # A project's batches are its id's: those of a removed one of that name are not.
            project = self._keys.tenancy.get(message.project)
            if project is None:
                return ListBatchesReply()
            recs = await book.list(project.id, status=message.status, limit=limit)
        else:
            recs = await book.list(status=message.status, limit=limit)
        return ListBatchesReply(batches=[self._view(r) for r in recs])

    async def get_batch(self, message: GetBatchRequest) -> BatchView:
        rec = await self._book().get(message.id)
        if rec is None:
            raise GRPCError(
                Status.NOT_FOUND, f"no batch {message.id!r}; see: llmgw ctl batches list"
            )
        return self._view(rec)

    async def cancel_batch(self, message: GetBatchRequest) -> BatchView:
        try:
            rec = await self._book().cancel(message.id)
        except BatchRefused as e:
            if e.status == 404:
                raise GRPCError(
                    Status.NOT_FOUND, f"no batch {message.id!r}; see: llmgw ctl batches list"
                ) from None
            raise GRPCError(Status.FAILED_PRECONDITION, e.message) from None
        return self._view(rec)
