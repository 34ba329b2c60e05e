"""The ledger of a batch's answers: appended to its files and committed with their usage.

Exactly once, across a kill -9: answers are committed in groups. The ledger
appends a group's lines to the output and error files, then writes in one
store transaction the lines' done marks, the batch's counts, the files'
new committed lengths and the requests' usage rows (the gateway hands a
batch's rows to the runner instead of its usage writer). A run killed
before that transaction leaves bytes past the committed lengths, which the
next run cuts off before sending those requests again; one killed after it
has nothing left to do for them. So each request's answer is in its file
once and metered once, whatever moment the process died.
"""

from __future__ import annotations

import asyncio
import json
import secrets

from gatewayd.batches.book import Active, Result
from gatewayd.batches.filestore import FileStore
from gatewayd.batches.objects import output_file_id
from gatewayd.store import Store
from gatewayd.store.batch_records import BatchProgress
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
    def __init__(self, store: Store, files: FileStore) -> None:
        self._store, self._files = store, files

    async def commit(self, b: Active) -> None:
        """Append the batch's answers waiting (``b.results``) and commit them."""
        if b.unsettled is not None and not await self._settle(b):
            return
        rec, results = b.rec, b.results
        if not results:
            return
        b.results = []
        out = b"".join(r.text for r in results if r.ok)
        err = b"".join(r.text for r in results if not r.ok)
        out_id = output_file_id(rec.batch_id, "output")
        err_id = output_file_id(rec.batch_id, "error")

        def write() -> None:
            self._files.append(out_id, out)
            self._files.append(err_id, err)

        completed = sum(1 for r in results if r.ok)
        progress = BatchProgress(
            batch_id=rec.batch_id,
            lines=[r.line for r in results],
            completed=completed,
            failed=len(results) - completed,
            output_bytes=rec.output_bytes + len(out),
            error_bytes=rec.error_bytes + len(err),
            prompt_tokens=sum(r.usage.prompt_tokens for r in results if r.usage is not None),
            cached_tokens=sum(r.usage.cached_tokens for r in results if r.usage is not None),
            completion_tokens=sum(
                r.usage.completion_tokens for r in results if r.usage is not None
            ),
        )
        try:
            await asyncio.to_thread(write)
        except BaseException:
            self.cut_back(b)
            b.results = results + b.results
            raise
        try:
            await self._store.record_batch_progress(
                progress, [r.usage for r in results if r.usage is not None]
            )
        except BaseException:
            # The transaction may have committed before its answer was lost (a
            # connection dropped): which it was is read back before anything else.
            b.unsettled = (results, progress)
            raise
        self._committed(b, results, progress)

    async def _settle(self, b: Active) -> bool:
        """After a commit that failed: was it written after all? Then it stands; if not, its
        bytes are cut and its answers wait for the next commit. False: the store is not
        there to say yet."""
        results, progress = b.unsettled
        try:
            stored = await self._store.get_batch(b.rec.batch_id)
        except StoreError:
            return False
        b.unsettled = None
        if (
            stored is not None
            and stored.output_bytes == progress.output_bytes
            and (stored.error_bytes == progress.error_bytes)
        ):
            self._committed(b, results, progress)
        else:
            self.cut_back(b)
            b.results = results + b.results
        return True

    def cut_back(self, b: Active) -> None:
        """Bytes past the committed ends go: their answers are written again."""
        self._files.cut(output_file_id(b.rec.batch_id, "output"), b.rec.output_bytes)
        self._files.cut(output_file_id(b.rec.batch_id, "error"), b.rec.error_bytes)

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
