"""Ids and the JSON shapes of OpenAI's File and Batch objects, from the store's records."""

from __future__ import annotations

import secrets
import time
from datetime import datetime

from gatewayd.store.batch_records import BatchRecord, FileRecord

# The endpoints a batch may name (OpenAI's list, of those llmgw serves).
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings", "/v1/responses")
COMPLETION_WINDOWS = {"24h": 24 * 3600}
_TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def new_id(prefix: str) -> str:
    """``prefix`` + 12 hex digits of milliseconds + 12 random: ids sort in the order made,
    which is what listing and ``after`` pagination go by."""
    return f"{prefix}{int(time.time() * 1000):012x}{secrets.token_hex(6)}"


def output_file_id(batch_id: str, kind: str) -> str:
    """The id of a batch's output (``kind`` "output") or error ("error") file: known from
    the batch alone, so a restart finds the file it was writing."""
    return f"file-{batch_id.removeprefix('batch_')}-{kind}"


def _unix(dt: datetime | None) -> int | None:
    return None if dt is None else int(dt.timestamp())


def _present(obj: dict) -> dict:
    # OpenAI's description makes these fields optional but never null: one with
    # nothing to say is left out (the SDKs read it as None either way).
    return {k: v for k, v in obj.items() if v is not None}


def file_object(rec: FileRecord) -> dict:
    return _present(
        {
            "id": rec.file_id,
            "object": "file",
            "bytes": rec.bytes,
            "created_at": _unix(rec.created_at),
            "expires_at": _unix(rec.expires_at),
            "filename": rec.filename,
            "purpose": rec.purpose,
            "status": "processed",
        }
    )


def batch_object(rec: BatchRecord) -> dict:
    out = {
        "id": rec.batch_id,
        "object": "batch",
        "endpoint": rec.endpoint,
        "errors": {"object": "list", "data": rec.errors} if rec.errors else None,
        "input_file_id": rec.input_file_id,
        "completion_window": rec.completion_window,
        "status": rec.status,
        "output_file_id": rec.output_file_id or None,
        "error_file_id": rec.error_file_id or None,
        "created_at": _unix(rec.created_at),
        "expires_at": _unix(rec.expires_at),
        "request_counts": {"total": rec.total, "completed": rec.completed, "failed": rec.failed},
        "metadata": rec.metadata or None,
        "usage": {
            "input_tokens": rec.prompt_tokens,
            "input_tokens_details": {"cached_tokens": rec.cached_tokens},
            "output_tokens": rec.completion_tokens,
            # Engines do not say which of their tokens were reasoning.
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": rec.prompt_tokens + rec.completion_tokens,
        },
    }
    for name in _TIMES:
        out[name] = _unix(getattr(rec, name))
    if len(rec.models) == 1:
        out["model"] = rec.models[0]
    return _present(out)
