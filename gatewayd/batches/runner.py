"""The batch runner: takes every batch in the book forward, a request at a time.

Requests go through ``Gateway.internal`` (the lowest admission band, the
key's limits and budgets, a usage row carrying the batch id), at most
``batches.max_in_flight`` at once, spread round-robin over the batches, and
only into the room a model's replicas have (slots no client's request holds
or waits for), so a batch never queues ahead of clients. An answer that says there is no room (429, 503, 504: admission full, no replica
ready, limits spent) puts the request back and the batch waits a little; any
other answer is the request's answer.

Answers are committed by the ledger (``ledger.py``), exactly once across a kill -9.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from gatewayd.batches.book import Active, BatchBook, Line, Result
from gatewayd.batches.filestore import FileStore
from gatewayd.batches.inputcheck import check_input
from gatewayd.batches.ledger import Ledger, answer_line, unsent_line
from gatewayd.batches.objects import output_file_id
from gatewayd.gateway.policy.keys import KeyCache, KeyInfo, KeyRefused
from gatewayd.store import Store
from gatewayd.store.batch_records import FileRecord
from llmgw.aio import within
from llmgw.config import BatchesConfig, FilesConfig
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

# Statuses that mean "no room now", never "this request failed".
NO_ROOM = (429, 503, 504)
# A batch told there is no room waits this long, doubling to the most.
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.25, 10.0
# The runner looks again at least this often (expiries, backoffs, a missed wake).
TICK_S = 1.0
# ... and this often while a batch waits for a replica's slot to free: a client's
# request ending wakes no one, and a slot left idle is throughput lost.
ROOM_POLL_S = 0.05
# At a stop, answers already in get this long to be committed.
STOP_COMMIT_S = 5.0
# Expired files are looked for this often.
SWEEP_INTERVAL_S = 60.0


def _now() -> datetime:
    return datetime.now(UTC)


class BatchRunner:
    def __init__(
        self,
        book: BatchBook,
        files: FileStore,
        store: Store,
        gateway,
        keys: KeyCache,
        cfg: BatchesConfig,
        files_cfg: FilesConfig,
        *,
        room: Callable[[str], int | None] | None = None,
    ) -> None:
        self._book, self._files, self._store = book, files, store
        self._ledger = Ledger(store, files)
        # Free slots of a model's replicas now (None: not held back), so that batch
        # requests take only what clients leave and never queue ahead of them.
        self._room = room
        self._waiting_room = False
        self._gateway, self._keys = gateway, keys
        self._cfg, self._files_cfg = cfg, files_cfg
        self.in_flight = 0
        self._tasks: set[asyncio.Task] = set()
        self._turn = 0  # round-robin start
        # Why a batch stops early (key revoked, expired), by batch id.
        self._stopping: dict[str, str] = {}

    async def run(self) -> None:
        await self._book.load()
        sweeper = asyncio.create_task(self._sweep_loop(), name="files-sweep")
        try:
            while True:
                try:
                    await self.step()
                except StoreError as e:
                    log.warning("batches wait for the store: %s", e)
                except Exception:
                    log.exception("the batch runner failed a step; trying again")
                tick = ROOM_POLL_S if self._waiting_room else TICK_S
                # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancel that
                # comes as the wake is set, and the runner then ran on after a stop (a
                # control plane that stopped leading waited on it for ever).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(tick):
                        await self._book.wake.wait()
                self._book.wake.clear()
        finally:
            sweeper.cancel()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(sweeper, *self._tasks, return_exceptions=True)
            await self._keep_answers()

    async def _keep_answers(self) -> None:
        """On a stop: commit the answers already in, rather than ask for them again."""
        for b in list(self._book.active.values()):
            if b.results:
                try:
                    await within(self._ledger.commit(b), STOP_COMMIT_S)
                except (Exception, asyncio.CancelledError):  # noqa: BLE001 (sent again next start)
                    log.warning(
                        "batch %s: answers not kept at stop; asked again at start", b.rec.batch_id
                    )

    async def step(self) -> None:
        """Send what there is room for, take every batch as far as it goes now, send again."""
        # First: a slot freed by an answer is not left idle while answers are committed.
        self._dispatch()
        for b in list(self._book.active.values()):
            await self._advance(b)
        self._dispatch()

    # ---- a batch's states ----------------------------------------------------

    async def _advance(self, b: Active) -> None:
        rec = b.rec
        if rec.status == "validating":
            await self._validate(b)
        elif rec.status == "in_progress" and not b.loaded:
            await self._resume(b)
        if b.results or b.unsettled is not None:
            await self._ledger.commit(b)
        if rec.status == "in_progress" and _now() >= rec.expires_at:
            self._stopping.setdefault(rec.batch_id, "expired")
        busy = b.in_flight > 0 or b.results or b.unsettled is not None
        if rec.status == "cancelling" and not busy:
            await self._finish(b, "cancelled")
        elif rec.status == "finalizing":
            await self._finish(b, "completed")
        elif rec.status == "in_progress" and not busy:
            why = self._stopping.get(rec.batch_id)
            if why == "expired":
                await self._write_unsent(
                    b, "batch_expired", "the batch's completion window ended before this request"
                )
                await self._finish(b, "expired")
            elif why:
                await self._write_unsent(b, "key_revoked", why)
                rec.errors = [{"code": "key_revoked", "message": why, "param": None, "line": None}]
                await self._finish(b, "failed")
            elif b.loaded and not b.todo:
                rec.status, rec.finalizing_at = "finalizing", _now()
                await self._store.update_batch(rec)
                await self._finish(b, "completed")

    async def _read_input(self, b: Active):
        rec = b.rec
        f = await self._store.get_file(rec.input_file_id)
        try:
            if f is None:
                raise FileNotFoundError(rec.input_file_id)
            data = await self._files.read(rec.input_file_id)
        except FileNotFoundError:
            return None
        return await asyncio.to_thread(check_input, data, rec.endpoint, self._cfg.max_requests)

    async def _fail(self, b: Active, errors: list[dict]) -> None:
        rec = b.rec
        rec.status, rec.failed_at, rec.errors = "failed", _now(), errors
        await self._store.update_batch(rec)
        self._book.active.pop(rec.batch_id, None)

    async def _validate(self, b: Active) -> None:
        rec = b.rec
        checked = await self._read_input(b)
        if checked is None:
            missing = {
                "code": "file_not_found",
                "message": f"the input file {rec.input_file_id} is gone (deleted or expired)",
                "param": "input_file_id",
                "line": None,
            }
            return await self._fail(b, [missing])
        if checked.errors:
            return await self._fail(b, checked.errors)
        if rec.status != "validating":  # cancelled while the file was read
            return
        rec.total, rec.models = len(checked.lines), checked.models
        rec.status, rec.in_progress_at = "in_progress", _now()
        await self._store.update_batch(rec)
        self._load(b, checked.lines, done=set())

    async def _resume(self, b: Active) -> None:
        """A batch a previous run left in progress: what it committed stands, the rest is sent."""
        rec = b.rec
        checked = await self._read_input(b)
        if checked is None or checked.errors:
            gone = {
                "code": "file_not_found",
                "message": f"the input file {rec.input_file_id} is gone or changed since the"
                " batch began",
                "param": "input_file_id",
                "line": None,
            }
            return await self._fail(b, [gone])
        done = await self._store.batch_done_lines(rec.batch_id)
        self._load(b, checked.lines, done)
        log.info(
            "batch %s resumed: %d of %d requests answered before the restart",
            rec.batch_id,
            len(done),
            rec.total,
        )

    def _load(self, b: Active, lines: list[Line], done: set[int]) -> None:
        # Bytes past the committed ends were written by a run that died before
        # committing them: their requests are sent again, so they go.
        self._ledger.cut_back(b)
        todo = [ln for ln in lines if ln.line not in done]
        b.todo.extend(todo)
        b.open_ids = {ln.line: ln.custom_id for ln in todo}
        b.loaded = True

    async def _write_unsent(self, b: Active, code: str, message: str) -> None:
        """Error lines for the requests never sent (expired, key revoked), committed."""
        b.results = [
            Result(line, False, unsent_line(custom_id, code, message))
            for line, custom_id in sorted(b.open_ids.items())
        ]
        b.todo.clear()
        await self._ledger.commit(b)

    async def _finish(self, b: Active, status: str) -> None:
        """Record the output and error files and end the batch (again after a restart: same)."""
        rec, now = b.rec, _now()
        expires = now + timedelta(seconds=self._files_cfg.expire_after)
        for kind, size in (("output", rec.output_bytes), ("error", rec.error_bytes)):
            file_id = output_file_id(rec.batch_id, kind)
            self._files.cut(file_id, size)
            if not size:
                self._files.remove(file_id)
                continue
            await self._store.put_file(
                FileRecord(
                    file_id=file_id,
                    project_id=rec.project_id,
                    key_id=rec.key_id,
                    filename=f"{rec.batch_id}_{kind}.jsonl",
                    purpose="batch_output",
                    bytes=size,
                    created_at=now,
                    expires_at=expires,
                )
            )
            setattr(rec, f"{kind}_file_id", file_id)
        rec.status = status
        setattr(rec, f"{status}_at", now)
        await self._store.update_batch(rec)
        self._book.active.pop(rec.batch_id, None)
        self._stopping.pop(rec.batch_id, None)
        log.info(
            "batch %s %s: %d completed, %d failed of %d",
            rec.batch_id,
            status,
            rec.completed,
            rec.failed,
            rec.total,
        )

    # ---- sending -------------------------------------------------------------

    def _key(self, key_id: str) -> tuple[KeyInfo | None, str]:
        """The batch's key as the key cache has it now, or why it may not be used."""
        try:
            rec = self._keys.get(key_id)
        except KeyRefused:
            return None, f"the API key {key_id} this batch was created with is gone"
        info = self._keys.info_of(rec.secret_sha256)
        refusal = info.refusal(_now()) if info is not None else "this API key is unknown"
        if info is None or refusal:
            return None, (
                f"the API key {key_id} this batch was created with may not be used any more"
                f" ({refusal}): the batch's remaining requests were not sent"
            )
        return info, ""

    def _dispatch(self) -> None:
        now = time.monotonic()
        self._waiting_room = False
        # Requests sent this round have not reached admission yet: counted here.
        taken: dict[str, int] = {}
        ready = [
            b
            for b in self._book.active.values()
            if b.rec.status == "in_progress"
            and b.loaded
            and b.todo
            and b.not_before <= now
            and b.rec.batch_id not in self._stopping
        ]
        if not ready:
            return
        self._turn = (self._turn + 1) % len(ready)
        ready = ready[self._turn :] + ready[: self._turn]
        while self.in_flight < self._cfg.max_in_flight and ready:
            for b in list(ready):
                if self.in_flight >= self._cfg.max_in_flight:
                    break
                if not b.todo or b.not_before > now:
                    ready.remove(b)
                    continue
                model = b.todo[0].model
                free = self._room(model) if self._room is not None else None
                if free is not None and free - taken.get(model, 0) <= 0:
                    self._waiting_room = True
                    ready.remove(b)
                    continue
                taken[model] = taken.get(model, 0) + 1
                key, why = self._key(b.rec.key_id)
                if key is None:
                    self._stopping[b.rec.batch_id] = why
                    ready.remove(b)
                    self._book.wake.set()
                    continue
                line = b.todo.popleft()
                self.in_flight += 1
                b.in_flight += 1
                task = asyncio.create_task(self._send(b, key, line))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _send(self, b: Active, key: KeyInfo, line: Line) -> None:
        rows: list = []
        try:
            try:
                status, body = await self._gateway.internal(
                    key, b.rec.endpoint, line.body, batch_id=b.rec.batch_id, on_usage=rows.append
                )
            except Exception:
                log.exception("batch %s: request %s failed here", b.rec.batch_id, line.custom_id)
                status = 500
                body = json.dumps(
                    {
                        "error": {
                            "message": "the gateway failed this request",
                            "type": "server_error",
                        }
                    }
                ).encode()
            if status in NO_ROOM:
                # No room now: not an answer, and not metered (it used no tokens).
                line.attempts += 1
                b.todo.appendleft(line)
                b.backoff_s = min(max(BACKOFF_FIRST_S, b.backoff_s * 2), BACKOFF_MAX_S)
                b.not_before = time.monotonic() + b.backoff_s
                return
            b.backoff_s = 0.0
            b.results.append(
                Result(
                    line.line,
                    status == 200,
                    answer_line(line.custom_id, status, body),
                    rows[-1] if rows else None,
                )
            )
        finally:
            self.in_flight -= 1
            b.in_flight -= 1
            self._book.wake.set()

    # ---- expired files ---------------------------------------------------------

    async def _sweep_loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except StoreError as e:
                log.warning("deleting expired files failed; trying again later: %s", e)
            except Exception:
                log.exception("deleting expired files failed; trying again later")
            await asyncio.sleep(SWEEP_INTERVAL_S)

    async def sweep(self) -> int:
        """Delete the files whose expiry has passed; how many went."""
        gone = 0
        for f in await self._store.expired_files(_now()):
            self._files.remove(f.file_id)
            await self._store.delete_file(f.file_id)
            gone += 1
        if gone:
            log.info("deleted %d expired files", gone)
        return gone
