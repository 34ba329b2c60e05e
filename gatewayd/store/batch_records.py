"""Files and batches (OpenAI's Files and Batch APIs), as the store keeps them.

Who owns what, states, times and counts; and the files' bytes, as chunks
(``file_chunks``, migration 0017) every control plane reads: an upload's, and a
batch's output and error files', which grow in the transaction that commits
their lines.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from llmgw.errors import StoreError

# The most bytes one chunk of a file holds: uploads are cut so, and a commit's
# output longer than this is written as several chunks.
CHUNK_BYTES = 1 << 20
# The statuses a batch may still move out of by running.
ACTIVE_STATUSES = ("validating", "in_progress", "finalizing", "cancelling")
# Statuses OpenAI's Batch object takes, in the order a batch can reach them.
BATCH_STATUSES = (
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
)


class FileRecord(BaseModel):
    """An uploaded file (purpose batch) or a batch's output or error file (batch_output)."""

    file_id: str
    # The owning project's id (ten_…): no other project sees the file.
    project_id: str
    # Its path as the store read it, for people (ignored when written).
    project: str = ""
    key_id: str = ""
    filename: str
    purpose: str
    bytes: int
    created_at: datetime
    # None: kept until deleted.
    expires_at: datetime | None = None


class BatchRecord(BaseModel):
    """A batch: its request, its state and how far it got."""

    batch_id: str
    # The owning project's id, and its path as the store read it (ignored when written).
    project_id: str
    project: str = ""
    key_id: str
    endpoint: str
    status: str
    input_file_id: str
    output_file_id: str = ""
    error_file_id: str = ""
    completion_window: str = "24h"
    created_at: datetime
    in_progress_at: datetime | None = None
    finalizing_at: datetime | None = None
    completed_at: datetime | None = None
    failed_at: datetime | None = None
    expired_at: datetime | None = None
    cancelling_at: datetime | None = None
    cancelled_at: datetime | None = None
    expires_at: datetime
    total: int = 0
    completed: int = 0
    failed: int = 0
    # The committed lengths of the output and error files (what a restart keeps).
    output_bytes: int = 0
    error_bytes: int = 0
    # Tokens of the answers committed (cached counted within prompt, as OpenAI counts).
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    metadata: dict[str, str] = Field(default_factory=dict)
    # OpenAI's BatchError objects: {code, message, param, line}.
    errors: list[dict] = Field(default_factory=list)
    # The models the requests name, in first-seen order.
    models: list[str] = Field(default_factory=list)
    # When a cancel was asked (on any control plane) and not yet taken up by the runner.
    cancel_requested_at: datetime | None = None
    # The input file's size at create: what the project has queued while it runs.
    input_bytes: int = 0


class BatchProgress(BaseModel):
    """Answered input lines committed at once: their done marks, counts and file ends."""

    batch_id: str
    # 0-based input lines now answered.
    lines: list[int]
    completed: int = 0
    failed: int = 0
    # The new committed lengths of the output and error files.
    output_bytes: int
    error_bytes: int
    # The lengths this commit goes on from (None: not checked). Another run that
    # committed in between (a leader that lost its lease and a new one) moved them:
    # the commit is refused (BatchMoved) rather than answering a line twice.
    from_output_bytes: int | None = None
    from_error_bytes: int | None = None
    # The bytes appended to the output and error files at those offsets.
    output: bytes = b""
    error: bytes = b""
    # The tokens of the usage rows written with it.
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


class BatchMoved(StoreError):
    """A batch's progress was committed by another run since this one read it: this
    run's answers are not its to commit (the batch is read again from the store)."""
