"""The batch runner over a real store (both backends), its requests answered by a stand-in
for ``Gateway.internal`` that keeps its contract: (status, body), and one usage row per
attempt handed to ``on_usage``. Files' bytes are the store's (``file_chunks``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gatewayd.batches import runner as runner_module
from gatewayd.batches.book import BatchBook
from gatewayd.batches.filestore import FileStore
from gatewayd.batches.ledger import answer_line
from gatewayd.batches.objects import new_id, output_file_id
from gatewayd.batches.runner import BatchRunner
from gatewayd.gateway.metering.usage import UsageRow
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.gateway.policy.tenancy import Tenancy
from gatewayd.store import Store
from gatewayd.store.batch_records import BatchProgress, FileRecord
from llmgw.config import BatchesConfig, FilesConfig
from llmgw.errors import StoreError

PROJECT = "Acme/ml/search"
LATER = datetime.now(UTC) + timedelta(days=1)


class StandIn:
    """Answers like Gateway.internal: ``plan`` gives statuses to answer in turn per custom_id."""

    def __init__(self, plan: dict[str, list[int]] | None = None) -> None:
        self.plan = plan or {}
        self.sent: list[str] = []

    async def internal(self, key, path, body, *, batch_id="", on_usage=None):
        request = json.loads(body)
        cid = request["messages"][0]["content"]
        self.sent.append(cid)
        statuses = self.plan.get(cid, [])
        status = statuses.pop(0) if statuses else 200
        tokens = 3 if status == 200 else 0
        on_usage(
            UsageRow(key_id=key.key_id, project=key.project, model=request["model"],
                     completion_tokens=tokens, status=status, batch_id=batch_id)
        )  # fmt: skip
        if status != 200:
            return status, json.dumps({"error": {"message": "no room", "code": None}}).encode()
        answer = {"object": "chat.completion", "choices": [{"message": {"content": cid}}]}
        return 200, json.dumps(answer).encode()


def _input(n: int) -> bytes:
    rows = [
        {
            "custom_id": f"c-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "chat", "messages": [{"role": "user", "content": f"c-{i}"}]},
        }
        for i in range(n)
    ]
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


async def _setup(store: Store, tmp_path, n: int, gateway: StandIn):
    tenancy = Tenancy(store)
    await tenancy.create("project", PROJECT, parents=True)
    keys = KeyCache(store, tenancy)
    key, _ = await keys.create(PROJECT, "batch", [], 0)
    project_id = tenancy.get(PROJECT).id
    files = FileStore(store)
    file_id = new_id("file-")
    await files.write(file_id, _input(n))
    now = datetime.now(UTC)
    await store.put_file(
        FileRecord(file_id=file_id, project_id=project_id, filename="in.jsonl", purpose="batch",
                   bytes=len(_input(n)), created_at=now)
    )  # fmt: skip
    book = BatchBook(store)
    runner = BatchRunner(book, files, store, gateway, keys, BatchesConfig(), FilesConfig())
    request = {"input_file_id": file_id, "endpoint": "/v1/chat/completions"}
    rec = await book.create(project_id, key.key_id, request | {"completion_window": "24h"})
    return book, runner, files, keys, rec


async def _run_out(runner: BatchRunner, book: BatchBook, steps: int = 500) -> None:
    for _ in range(steps):
        if not book.active:
            return
        await runner.step()
        for task in list(runner._tasks):
            await task
    raise AssertionError("the batch did not end")


async def _usage(store: Store, batch_id: str) -> list:
    start = datetime.now(UTC) - timedelta(hours=1)
    return [r async for r in store.usage_rows(start, LATER) if r.batch_id == batch_id]


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    # The wait after "no room" is for replicas; these tests have none to wait for.
    monkeypatch.setattr(runner_module, "BACKOFF_FIRST_S", 0.0)
    monkeypatch.setattr(runner_module, "BACKOFF_MAX_S", 0.0)


async def test_a_restart_sends_only_what_was_not_committed_and_writes_each_answer_once(
    store: Store, tmp_path
):
    gateway = StandIn()
    _, runner, files, _, rec = await _setup(store, tmp_path, 5, gateway)
    await runner.step()  # validated: in progress, nothing sent yet is committed
    for task in list(runner._tasks):
        task.cancel()
    # As a run killed mid-way leaves it: lines 0 and 1 committed (with their usage and
    # their bytes); line 2 answered but never committed, so nothing of it is in the store.
    committed = answer_line("c-0", 200, b"{}") + answer_line("c-1", 200, b"{}")
    row = UsageRow(key_id=rec.key_id, project=PROJECT, model="chat", batch_id=rec.batch_id)
    await store.record_batch_progress(
        BatchProgress(batch_id=rec.batch_id, lines=[0, 1], completed=2,
                      output_bytes=len(committed), error_bytes=0, from_output_bytes=0,
                      from_error_bytes=0, output=committed),
        [row, row],
    )  # fmt: skip
    out_id = output_file_id(rec.batch_id, "output")

    restarted = BatchBook(store)
    await restarted.load()
    gateway.sent.clear()
    again = BatchRunner(restarted, files, store, gateway, runner._keys, BatchesConfig(),
                        FilesConfig())  # fmt: skip
    await _run_out(again, restarted)

    assert sorted(gateway.sent) == ["c-2", "c-3", "c-4"]
    done = await store.get_batch(rec.batch_id)
    assert done.status == "completed" and (done.completed, done.failed) == (5, 0)
    data = await files.read(out_id)
    lines = [json.loads(x) for x in data.splitlines()]
    assert sorted(x["custom_id"] for x in lines) == [f"c-{i}" for i in range(5)]
    assert len(await _usage(store, rec.batch_id)) == 5
    out = await store.get_file(out_id)
    assert out.purpose == "batch_output" and out.bytes == len(data) == done.output_bytes


async def test_no_room_puts_a_request_back_unmetered_and_an_error_answer_is_the_answer(
    store: Store, tmp_path
):
    gateway = StandIn({"c-1": [503, 429, 504], "c-2": [400]})
    book, runner, files, _, rec = await _setup(store, tmp_path, 3, gateway)
    await _run_out(runner, book)

    assert gateway.sent.count("c-1") == 4 and gateway.sent.count("c-2") == 1
    done = await store.get_batch(rec.batch_id)
    assert done.status == "completed" and (done.completed, done.failed) == (2, 1)
    errors = [json.loads(x) for x in (await files.read(done.error_file_id)).splitlines()]
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [("c-2", 400)]
    rows = await _usage(store, rec.batch_id)
    assert sorted(r.status for r in rows) == [200, 200, 400]


async def test_a_revoked_keys_batch_fails_the_rest_in_words(store: Store, tmp_path):
    gateway = StandIn()
    book, runner, files, keys, rec = await _setup(store, tmp_path, 3, gateway)
    await keys.revoke(rec.key_id)
    await _run_out(runner, book)

    assert gateway.sent == []
    done = await store.get_batch(rec.batch_id)
    assert done.status == "failed" and done.failed == 3 and done.output_file_id == ""
    assert done.errors[0]["code"] == "key_revoked"
    assert f"the API key {rec.key_id} this batch was created with" in done.errors[0]["message"]
    errors = [json.loads(x) for x in (await files.read(done.error_file_id)).splitlines()]
    assert [e["custom_id"] for e in errors] == ["c-0", "c-1", "c-2"]
    assert all(e["response"] is None and e["error"]["code"] == "key_revoked" for e in errors)


async def test_requests_are_sent_only_into_the_room_the_replicas_have(store: Store, tmp_path):
    gateway = StandIn()
    book, runner, _, _, rec = await _setup(store, tmp_path, 10, gateway)
    free = {"chat": 3}
    runner._room = lambda model: free[model]
    await runner.step()  # validates, then sends what there is room for
    assert runner.in_flight == 3
    free["chat"] = 0  # clients took every slot: nothing more is sent
    for task in list(runner._tasks):
        await task
    await runner.step()
    assert runner.in_flight == 0 and runner._waiting_room
    free["chat"] = 100
    await _run_out(runner, book)
    assert len(gateway.sent) == 10 and (await store.get_batch(rec.batch_id)).completed == 10


async def test_a_batch_past_its_window_expires_with_its_unsent_requests_in_the_error_file(
    store: Store, tmp_path
):
    gateway = StandIn()
    book, runner, files, _, rec = await _setup(store, tmp_path, 4, gateway)
    runner._room = lambda model: 1  # one request at a time
    await runner.step()
    book.active[rec.batch_id].rec.expires_at = datetime.now(UTC) - timedelta(seconds=1)
    await _run_out(runner, book)

    done = await store.get_batch(rec.batch_id)
    assert done.status == "expired" and done.expired_at is not None
    assert done.completed + done.failed == 4 and done.failed >= 1
    errors = [json.loads(x) for x in (await files.read(done.error_file_id)).splitlines()]
    assert {e["error"]["code"] for e in errors} == {"batch_expired"}
    assert len(gateway.sent) == done.completed == len(await _usage(store, rec.batch_id))


async def test_expired_files_are_deleted_with_their_bytes(store: Store, tmp_path):
    _, runner, files, _, rec = await _setup(store, tmp_path, 1, StandIn())
    f = await store.get_file(rec.input_file_id)
    await store.put_file(f.model_copy(update={"expires_at": datetime.now(UTC)}))
    # The batch reading it ends first (an input's bytes stay while its batch runs).
    await store.update_batch(rec.model_copy(update={"status": "cancelled"}))
    assert await runner.sweep() == 1
    assert await store.get_file(f.file_id) is None and await files.read(f.file_id) == b""


class FailingCommits:
    """The store, but its next progress writes fail: ``after`` (committed, then the answer
    lost, as when a connection drops) or before (nothing written)."""

    def __init__(self, store: Store, failures: list[str]) -> None:
        self._store, self.failures = store, failures

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def record_batch_progress(self, progress, usage):
        how = self.failures.pop(0) if self.failures else ""
        if how == "before":
            raise StoreError("the store went away")
        await self._store.record_batch_progress(progress, usage)
        if how == "after":
            raise StoreError("the store went away as it answered")


@pytest.mark.parametrize("how", ["before", "after"])
async def test_a_commit_that_failed_is_found_written_or_not_and_nothing_is_doubled(
    store: Store, tmp_path, how
):
    gateway = StandIn()
    book, runner, files, _, rec = await _setup(store, tmp_path, 6, gateway)
    runner._ledger._store = FailingCommits(store, [how, how])
    for _ in range(100):
        if not book.active:
            break
        try:
            await runner.step()
        except StoreError:
            pass  # the run loop logs it and steps again
        for task in list(runner._tasks):
            await task
    done = await store.get_batch(rec.batch_id)
    assert done.status == "completed" and done.completed == 6
    lines = [json.loads(x) for x in (await files.read(done.output_file_id)).splitlines()]
    assert sorted(x["custom_id"] for x in lines) == [f"c-{i}" for i in range(6)]
    assert len(await _usage(store, rec.batch_id)) == 6
