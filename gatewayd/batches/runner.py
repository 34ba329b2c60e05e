"""The batch runner: takes every batch in the book forward, a request at a time, on the leader.

Requests go through ``Gateway.internal`` (the lowest admission band, the
key's limits and budgets, a usage row carrying the batch id), at most
``batches.max_in_flight`` at once, spread round-robin over the batches, and
only into the room a model's replicas have (slots no client's request holds
or waits for), so a batch never queues ahead of clients. An answer that says there is no room (429, 503, 504: admission full, no replica
ready, limits spent) puts the request back and the batch waits a little; any
other answer is the request's answer.

A batch's input is read from the store as it runs, never held whole: checked
a page at a time first (``inputcheck.py``), then read again as it is sent, at
most a window of lines ahead (READ_AHEAD_LINES or twice max_in_flight, and
READ_AHEAD_BYTES) of what is answered. So a 200 MB input keeps the leader's
memory flat.

Answers are committed by the ledger (``ledger.py``), exactly once across a
kill -9 and a change of leader: the new leader's runner takes the batches up
from the store and sends only the lines not committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from gatewayd.batches.book import Active, BatchBook, Line, Result, held_lines
from gatewayd.batches.filestore import FileStore, LineReader
from gatewayd.batches.inputcheck import InputCheck, parse_request
from gatewayd.batches.ledger import Ledger, answer_line, unsent_line
from gatewayd.batches.objects import output_file_id
from gatewayd.gateway.policy.keys import KeyCache, KeyInfo, KeyRefused
from gatewayd.store import Store
from gatewayd.store.batch_records import BatchMoved, FileRecord
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
# An upload begun this long ago and never finished was left by a control plane
# that died: its chunks go.
UPLOAD_STALE_S = 6 * 3600.0
# A batch's lines held in memory at most (to send, in flight, answered and not
# yet committed): this or twice batches.max_in_flight, whichever is more ...
READ_AHEAD_LINES = 256
# ... and no more request bytes than this (one line at least, however long).
READ_AHEAD_BYTES = 16 * 2**20
# A resumed batch's answered lines are read from the store this many at a time.
DONE_PAGE = 4096


class InputChanged(Exception):
    """A line of a running batch's input is not the request it was checked to be."""


class RequestReader:
    """A batch's requests in input order, read from the store as they are wanted; those
    committed before (a batch taken up after a restart or a change of leader) skipped."""

    def __init__(self, lines: LineReader, store: Store, batch_id: str, *, skip_done: bool):
        self._lines, self._store, self._batch_id = lines, store, batch_id
        self._skip = skip_done
        self._done: set[int] = set()
        self._done_to = 0
        # The requests read so far (every index below this was seen).
        self.count = 0

    @property
    def bytes_read(self) -> int:
        return self._lines.bytes_read

    async def next(self) -> Line | None:
        while True:
            got = await self._lines.next()
            if got is None:
                return None
            _, raw = got
            if not raw.strip():
                continue
            index, self.count = self.count, self.count + 1
            if self._skip:
                if index >= self._done_to:
                    self._done = await self._store.batch_done_lines(
                        self._batch_id, index, index + DONE_PAGE
                    )
                    self._done_to = index + DONE_PAGE
                if index in self._done:
                    continue
            try:
                return parse_request(raw, index)
            except (ValueError, KeyError, TypeError) as e:
                raise InputChanged(f"line {index + 1} is not a request: {e}") from None

    async def close(self) -> None:
        await self._lines.close()


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
        self._ledger = Ledger(store)
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
        # The most lines of one batch held in memory at once (held_lines).
        self.window = max(READ_AHEAD_LINES, 2 * cfg.max_in_flight)
        self._loaded = False
        # Whether run() runs now (on the leader).
        self.running = False

    async def run(self) -> None:
        # Files an earlier llmgw kept on disk are in the store before any batch goes on.
        await self._files.imported.wait()
        self._loaded = False
        self.running = True
        sweeper = asyncio.create_task(self._sweep_loop(), name="files-sweep")
        try:
            while True:
                try:
                    if not self._loaded:
                        # Afresh: what this book held before (an earlier stint as
                        # leader) is stale, another leader took the batches on since.
                        await self._book.load()
                        self._loaded = True
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
            self.running = False
            sweeper.cancel()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(sweeper, *self._tasks, return_exceptions=True)
            await self._keep_answers()
            # Standing by: the batches are the store's (and the next leader's) now; what
            # this book held would only be shown stale.
            self._book.active.clear()

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
        # Batches made, or cancels asked, on any control plane.
        await self._book.refresh()
        for b in list(self._book.active.values()):
            try:
                await self._advance(b)
            except BatchMoved as e:
                # Another run committed to it: let it go, and take it up afresh from the
                # store if it is still to run (nothing it committed is sent again).
                log.warning("batch %s: %s; read again from the store", b.rec.batch_id, e)
                await self._let_go(b)
                self._book.dirty = True
        self._dispatch()

    async def _let_go(self, b: Active) -> None:
        if self._book.active.get(b.rec.batch_id) is b:
            self._book.active.pop(b.rec.batch_id, None)
        b.todo.clear()
        b.results = []
        b.unsettled = None
        self._stopping.pop(b.rec.batch_id, None)
        if b.reader is not None:
            await b.reader.close()

    # ---- a batch's states ----------------------------------------------------

    async def _advance(self, b: Active) -> None:
        rec = b.rec
        if rec.status == "validating":
            await self._validate(b)
        elif rec.status == "in_progress" and not b.loaded:
            await self._resume(b)
        if b.results or b.unsettled is not None:
            await self._ledger.commit(b)
        if rec.status == "in_progress" and b.loaded:
            await self._refill(b)
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
                if await self._write_unsent(
                    b, "batch_expired", "the batch's completion window ended before this request"
                ):
                    await self._finish(b, "expired")
            elif why:
                if await self._write_unsent(b, "key_revoked", why):
                    rec.errors = [
                        {"code": "key_revoked", "message": why, "param": None, "line": None}
                    ]
                    await self._finish(b, "failed")
            elif b.loaded and b.exhausted and not b.todo:
                rec.status, rec.finalizing_at = "finalizing", _now()
                await self._store.update_batch(rec)
                await self._finish(b, "completed")

    def _missing(self, b: Active, words: str) -> list[dict]:
        return [
            {
                "code": "file_not_found",
                "message": f"the input file {b.rec.input_file_id} {words}",
                "param": "input_file_id",
                "line": None,
            }
        ]

    async def _fail(self, b: Active, errors: list[dict]) -> None:
        rec = b.rec
        rec.status, rec.failed_at, rec.errors = "failed", _now(), errors
        await self._store.update_batch(rec)
        self._book.active.pop(rec.batch_id, None)
        if b.reader is not None:
            await b.reader.close()
        # What it wrote before it failed is no file: its bytes go (an input deleted
        # while it ran, too).
        for file_id in (
            rec.input_file_id,
            output_file_id(rec.batch_id, "output"),
            output_file_id(rec.batch_id, "error"),
        ):
            await self._drop_bytes(file_id)

    async def _drop_bytes(self, file_id: str) -> None:
        try:
            await self._store.drop_file_bytes(file_id)
        except StoreError as e:  # the sweep drops them later
            log.warning("the bytes of %s wait for the sweep: %s", file_id, e)

    async def _validate(self, b: Active) -> None:
        """Check the input a page at a time as it is read from the store; keep none of it."""
        rec = b.rec
        f = await self._store.get_file(rec.input_file_id)
        if f is None:
            return await self._fail(b, self._missing(b, "is gone (deleted or expired)"))
        check = InputCheck(rec.endpoint, self._cfg.max_requests)
        lines = self._files.lines(rec.input_file_id)
        try:
            while (page := await lines.next_page()) is not None:
                if not await asyncio.to_thread(check.feed, page):
                    break
        finally:
            await lines.close()
        if not check.stopped and lines.bytes_read != f.bytes:
            return await self._fail(
                b,
                self._missing(b, f"holds {lines.bytes_read} of its {f.bytes} bytes in the store"),
            )
        checked = check.result()
        if checked.errors:
            return await self._fail(b, checked.errors)
        if rec.status != "validating":  # cancelled while the file was read
            return
        rec.total, rec.models = checked.total, checked.models
        rec.status, rec.in_progress_at = "in_progress", _now()
        await self._store.update_batch(rec)
        self._open(b, skip_done=False)

    async def _resume(self, b: Active) -> None:
        """A batch a previous run (this control plane's, or the leader before) left in
        progress: what it committed stands, the rest is read and sent."""
        rec = b.rec
        if not await self._store.file_chunks(rec.input_file_id, 0, 1) and rec.total:
            return await self._fail(b, self._missing(b, "is gone since the batch began"))
        answered = rec.completed + rec.failed
        self._open(b, skip_done=answered > 0)
        log.info(
            "batch %s resumed: %d of %d requests answered before",
            rec.batch_id,
            answered,
            rec.total,
        )

    def _open(self, b: Active, *, skip_done: bool) -> None:
        b.reader = RequestReader(
            self._files.lines(b.rec.input_file_id), self._store, b.rec.batch_id,
            skip_done=skip_done,
        )  # fmt: skip
        b.todo.clear()
        b.open_ids, b.held_bytes = {}, 0
        b.loaded, b.exhausted = True, False

    async def _read_one(self, b: Active) -> Line | None:
        """The batch's next request to send, or None when every one was read (the batch
        failed if the input did not hold what was checked)."""
        reader = b.reader
        try:
            line = await reader.next()
        except InputChanged as e:
            await self._fail(b, self._missing(b, f"changed since the batch began ({e})"))
            return None
        if line is None:
            b.exhausted = True
            if reader.count != b.rec.total:
                await self._fail(
                    b,
                    self._missing(
                        b, f"holds {reader.count} of its {b.rec.total} requests in the store"
                    ),
                )
            return None
        b.open_ids[line.line] = line.custom_id
        b.held_bytes += len(line.body)
        return line

    async def _refill(self, b: Active) -> None:
        """Read the input on, as far as the window allows."""
        while (
            not b.exhausted
            and held_lines(b) < self.window
            and (b.held_bytes < READ_AHEAD_BYTES or not b.todo)
            and b.rec.batch_id not in self._stopping
            and self._book.active.get(b.rec.batch_id) is b
        ):
            line = await self._read_one(b)
            if line is None:
                return
            b.todo.append(line)

    async def _write_unsent(self, b: Active, code: str, message: str) -> bool:
        """Error lines for the requests never sent (expired, key revoked), committed a window
        at a time as the rest of the input is read; False when a commit is still to make."""
        b.todo.clear()
        b.held_bytes = 0
        while True:
            b.results = [
                Result(line, False, unsent_line(custom_id, code, message))
                for line, custom_id in sorted(b.open_ids.items())
            ]
            await self._ledger.commit(b)
            if b.results or b.unsettled is not None or b.open_ids:
                return False  # the store is away: again at the next step
            if not b.loaded or b.exhausted:
                return True
            while len(b.open_ids) < self.window:
                line = await self._read_one(b)
                if line is None:
                    if self._book.active.get(b.rec.batch_id) is not b:
                        return False  # failed: nothing more to write
                    break

    async def _finish(self, b: Active, status: str) -> None:
        """Record the output and error files and end the batch (again after a restart: same)."""
        rec, now = b.rec, _now()
        expires = now + timedelta(seconds=self._files_cfg.expire_after)
        for kind, size in (("output", rec.output_bytes), ("error", rec.error_bytes)):
            file_id = output_file_id(rec.batch_id, kind)
            if not size:
                continue
            # Its bytes are in the store already, committed with their lines.
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
        if b.reader is not None:
            await b.reader.close()
        # An input deleted while the batch ran kept its bytes until now.
        await self._drop_bytes(rec.input_file_id)
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
            b.held_bytes -= len(line.body)
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
            await self._store.delete_file(f.file_id)
            gone += 1
        if gone:
            log.info("deleted %d expired files", gone)
        # Uploads whose control plane died mid-way, and bytes nothing wants any more.
        chunks = await self._store.sweep_file_bytes(_now() - timedelta(seconds=UPLOAD_STALE_S))
        if chunks:
            log.info("dropped %d chunks of files no longer wanted", chunks)
        return gone
