"""The ledger of a batch's answers: committed with their usage, exactly once, in the shared store.

Answers are committed in groups, each in one store transaction: the lines'
done marks, the batch's counts, the output and error bytes appended as chunks
at the files' committed ends (which move with them), and the requests' usage
rows (the gateway hands a batch's rows to the runner instead of its usage
writer). A run killed before that transaction has written nothing of the
group: its requests are sent again by whichever control plane runs the batch
next. One killed after it has nothing left to do for them. So each request's
answer is in its file once and metered once, whatever moment the process
died, on whichever control plane.

Each commit says the ends it goes on from; one that finds them moved (another
run committed since: a leader that lost its lease, and the new one) writes
nothing and raises BatchMoved, and this run lets the batch go. Two runs never
commit the same line.
"""

from __future__ import annotations

import json
import secrets

from gatewayd.batches.book import Active, Result
from gatewayd.store import Store
from gatewayd.store.batch_records import BatchMoved, BatchProgress
from llmgw.errors import StoreError


def _line(custom_id: str, response: dict | None, error: dict | None) -> bytes:
    """One line of an output or error file, in OpenAI's shape."""
    obj = {
        "id": f"batch_req_{secrets.token_hex(12)}",
        "custom_id": custom_id,
        "response": response,
        "error": error,
    }
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def answer_line(custom_id: str, status: int, body: bytes) -> bytes:
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = body.decode("utf-8", "replace")
    response = {
        "status_code": status,
        "request_id": f"req_{secrets.token_hex(12)}",
        "body": parsed,
    }
    return _line(custom_id, response, None)


def unsent_line(custom_id: str, code: str, message: str) -> bytes:
    """The error-file line of a request never sent (expired, its key revoked)."""
    return _line(custom_id, None, {"code": code, "message": message})


class Ledger:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def commit(self, b: Active) -> None:
        """Commit the batch's answers waiting (``b.results``) with their bytes and usage."""
        if b.unsettled is not None and not await self._settle(b):
            return
        rec, results = b.rec, b.results
        if not results:
            return
        b.results = []
        out = b"".join(r.text for r in results if r.ok)
        err = b"".join(r.text for r in results if not r.ok)
        completed = sum(1 for r in results if r.ok)
        progress = BatchProgress(
            batch_id=rec.batch_id,
            lines=[r.line for r in results],
            completed=completed,
            failed=len(results) - completed,
            output_bytes=rec.output_bytes + len(out),
            error_bytes=rec.error_bytes + len(err),
            from_output_bytes=rec.output_bytes,
            from_error_bytes=rec.error_bytes,
            output=out,
            error=err,
            prompt_tokens=sum(r.usage.prompt_tokens for r in results if r.usage is not None),
            cached_tokens=sum(r.usage.cached_tokens for r in results if r.usage is not None),
            completion_tokens=sum(
                r.usage.completion_tokens for r in results if r.usage is not None
            ),
        )
        try:
            await self._store.record_batch_progress(
                progress, [r.usage for r in results if r.usage is not None]
            )
        except BatchMoved:
            raise  # nothing written: another run has the batch
        except BaseException:
            # The transaction may have committed before its answer was lost (a
            # connection dropped): which it was is read back before anything else.
            b.unsettled = (results, progress)
            raise
        self._committed(b, results, progress)

    async def _settle(self, b: Active) -> bool:
        """After a commit that failed: was it written after all? Then it stands; if not, its
        answers wait for the next commit. False: the store is not there to say yet."""
        results, progress = b.unsettled
        try:
            stored = await self._store.get_batch(b.rec.batch_id)
        except StoreError:
            return False
        b.unsettled = None
        ends = None if stored is None else (stored.output_bytes, stored.error_bytes)
        if ends == (progress.output_bytes, progress.error_bytes):
            self._committed(b, results, progress)
        elif ends == (progress.from_output_bytes, progress.from_error_bytes):
            b.results = results + b.results
        else:
            raise BatchMoved(
                f"batch {b.rec.batch_id} was taken forward by another run",
                hint="it is read again from the store",
            )
        return True

    def _committed(self, b: Active, results: list[Result], progress: BatchProgress) -> None:
        rec = b.rec
        rec.completed += progress.completed
        rec.failed += progress.failed
        rec.output_bytes, rec.error_bytes = progress.output_bytes, progress.error_bytes
        rec.prompt_tokens += progress.prompt_tokens
        rec.cached_tokens += progress.cached_tokens
        rec.completion_tokens += progress.completion_tokens
        for r in results:
            b.open_ids.pop(r.line, None)
