"""OpenAI's Files and Batch APIs through a real gatewayd and sim replicas, with the `openai` SDK.

The kill -9 of gatewayd halfway through is in tests/e2e/test_up_batches.py;
these cover the API's shapes and refusals, a batch run to its end, a bad input
file, cancelling, and a batch a restarted gatewayd (same store) finishes.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import httpx
import openai
import pytest

from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for
from tests.gatewayd.gateway.openapi_check import schema_errors

PROJECT = "Acme/ml/search"
OTHER = "Acme/ml/other"


def _spec(name: str, *args: str) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        replicas_min=1,
        replicas_max=1,
        slots=8,
        profiles=[
            ModelProfile(name="default", engine="sim", startup_timeout_s=60, args=list(args))
        ],
    )


async def _serve(cluster, *specs: ModelSpec) -> str:
    await cluster.start_agent("cpu-node")
    async with cluster.admin() as admin:
        for spec in specs:
            await admin.put_model(spec)
        await admin.create_tenant("project", PROJECT, parents=True)
        await admin.create_tenant("project", OTHER, parents=True)

        async def ready():
            for spec in specs:
                rs = (await admin.list_replicas(spec.name)).replicas
                if not rs or rs[0].state != "ready":
                    return False
            return True

        await wait_for(ready, attempts=400)
    return f"http://127.0.0.1:{cluster.server.ports['http']}/v1"


def _client(base: str, secret: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0)


def chat_lines(n: int, model: str = "chat", url: str = "/v1/chat/completions") -> bytes:
    rows = [
        {
            "custom_id": f"chat-{i}",
            "method": "POST",
            "url": url,
            "body": {
                "model": model,
                "messages": [{"role": "user", "content": f"question {i}"}],
                "max_tokens": 3,
            },
        }
        for i in range(n)
    ]
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


async def _finished(client: openai.AsyncOpenAI, batch_id: str, attempts: int = 600):
    async def done():
        b = await client.batches.retrieve(batch_id)
        return b if b.status in ("completed", "failed", "expired", "cancelled") else None

    return await wait_for(done, attempts=attempts, interval_s=0.05)


@pytest.fixture
async def served(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        base = await _serve(cluster, _spec("chat", "--ttft-ms", "1", "--itl-ms", "1"))
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
            other = await admin.create_key(OTHER)
        yield cluster, _client(base, key.secret), _client(base, other.secret), key


async def test_a_chat_batch_runs_to_completion_and_its_output_reads_back_with_the_sdk(served):
    cluster, client, _, key = served
    up = await client.files.create(file=("in.jsonl", io.BytesIO(chat_lines(30))), purpose="batch")
    assert up.object == "file" and up.purpose == "batch" and up.bytes == len(chat_lines(30))
    assert up.filename == "in.jsonl" and up.expires_at > up.created_at
    batch = await client.batches.create(
        input_file_id=up.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "nightly"},
    )
    assert batch.status == "validating" and batch.metadata == {"job": "nightly"}

    done = await _finished(client, batch.id)
    assert done.status == "completed", done
    assert done.request_counts.total == 30 and done.request_counts.completed == 30
    assert done.request_counts.failed == 0 and done.error_file_id is None
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    text = (await client.files.content(done.output_file_id)).text
    lines = [json.loads(x) for x in text.splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(f"chat-{i}" for i in range(30))
    first = lines[0]
    assert first["id"].startswith("batch_req_") and first["error"] is None
    assert first["response"]["status_code"] == 200
    assert first["response"]["body"]["object"] == "chat.completion"

    out = await client.files.retrieve(done.output_file_id)
    assert out.purpose == "batch_output" and out.bytes == len(text.encode())
    listed = await client.batches.list()
    assert [b.id for b in listed.data] == [batch.id]

    # Every request metered once, with the batch's id.
    rows = await _usage_of(cluster, batch.id)
    assert len(rows) == 30 and {r.key_id for r in rows} == {key.key_id}
    assert all(r.status == 200 and r.completion_tokens > 0 for r in rows)
    answered = [x["response"]["body"]["usage"] for x in lines]
    assert done.usage.output_tokens == sum(u["completion_tokens"] for u in answered)
    assert done.usage.input_tokens == sum(u["prompt_tokens"] for u in answered) > 0
    assert done.usage.output_tokens == sum(r.completion_tokens for r in rows)

    with pytest.raises(openai.ConflictError) as e:
        await client.batches.cancel(batch.id)
    assert "only a validating or in-progress batch can be cancelled" in e.value.message
    await client.close()


async def _usage_of(cluster, batch_id: str) -> list:
    await cluster.server.usage.flush()
    start = datetime.now(UTC) - timedelta(hours=1)
    end = datetime.now(UTC) + timedelta(hours=1)
    return [r async for r in cluster.server.store.usage_rows(start, end) if r.batch_id == batch_id]


async def test_a_file_is_another_projects_404_and_an_upload_over_the_cap_is_413(served):
    cluster, client, other, _ = served
    up = await client.files.create(file=("in.jsonl", io.BytesIO(chat_lines(2))), purpose="batch")
    for call in (
        other.files.retrieve(up.id),
        other.files.content(up.id),
        other.files.delete(up.id),
        other.batches.create(
            input_file_id=up.id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError) as e:
            await call
        assert f"no file {up.id!r}" in e.value.message
    assert (await other.files.list()).data == []
    assert [f.id for f in (await client.files.list()).data] == [up.id]

    cluster.server.cfg.files.max_bytes = 1000
    with pytest.raises(openai.APIStatusError) as e:
        await client.files.create(file=("big.jsonl", io.BytesIO(b"x" * 5000)), purpose="batch")
    assert e.value.status_code == 413
    assert "1 KB cap on uploads (files.max_bytes in server.yaml)" in e.value.message
    # Over the cap by less than the form's room: the file's own size is what counts.
    with pytest.raises(openai.APIStatusError) as e:
        await client.files.create(file=("big.jsonl", io.BytesIO(b"x" * 1001)), purpose="batch")
    assert e.value.status_code == 413

    with pytest.raises(openai.BadRequestError) as e:
        await client.files.create(file=("a.jsonl", io.BytesIO(b"{}")), purpose="fine-tune")
    assert "files are uploaded for batch" in e.value.message

    deleted = await client.files.delete(up.id)
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError):
        await client.files.retrieve(up.id)
    await client.close()
    await other.close()


async def test_a_bad_input_file_fails_the_batch_with_openai_shaped_errors(served):
    _, client, _, _ = served
    lines = chat_lines(2) + b"not json\n" + chat_lines(1) + chat_lines(1, url="/v1/embeddings")
    up = await client.files.create(file=("bad.jsonl", io.BytesIO(lines)), purpose="batch")
    batch = await client.batches.create(
        input_file_id=up.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = await _finished(client, batch.id)
    assert done.status == "failed" and done.failed_at
    errors = {(e.code, e.line) for e in done.errors.data}
    assert errors == {
        ("invalid_json_line", 3),
        ("duplicate_custom_id", 4),
        ("duplicate_custom_id", 5),
        ("invalid_url", 5),
    }, done.errors
    assert done.request_counts.completed == 0 and done.output_file_id is None

    for bad, word in (
        ({"endpoint": "/v1/completions"}, "endpoint"),
        ({"completion_window": "1h"}, "completion_window"),
    ):
        request = {
            "input_file_id": up.id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        }
        with pytest.raises(openai.BadRequestError) as e:
            await client.batches.create(**(request | bad))
        assert e.value.body["param"] == word
    await client.close()


async def test_a_cancelled_batch_stops_sending_and_keeps_what_was_answered(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        # Slow answers: the batch is still running when it is cancelled.
        base = await _serve(cluster, _spec("chat", "--ttft-ms", "200", "--tokens", "2"))
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
        client = _client(base, key.secret)
        up = await client.files.create(
            file=("in.jsonl", io.BytesIO(chat_lines(400))), purpose="batch"
        )
        batch = await client.batches.create(
            input_file_id=up.id, endpoint="/v1/chat/completions", completion_window="24h"
        )

        async def started():
            b = await client.batches.retrieve(batch.id)
            return b.status == "in_progress" and b.request_counts.completed > 0

        await wait_for(started, attempts=600)
        cancelling = await client.batches.cancel(batch.id)
        assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
        done = await _finished(client, batch.id)
        assert done.status == "cancelled" and done.cancelled_at
        answered = done.request_counts.completed
        assert 0 < answered < 400
        text = (await client.files.content(done.output_file_id)).text
        assert len(text.splitlines()) == answered
        assert len(await _usage_of(cluster, batch.id)) == answered
        await client.close()


async def test_files_and_batches_answer_in_the_shapes_of_openais_description(served):
    cluster, client, _, key = served
    base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
    async with httpx.AsyncClient(
        base_url=base, headers={"authorization": f"Bearer {key.secret}"}
    ) as h:
        empty = (await h.get("/files")).json()
        assert schema_errors(empty, "ListFilesResponse") == [] and empty["data"] == []
        assert schema_errors((await h.get("/batches")).json(), "ListBatchesResponse") == []
        up = await h.post(
            "/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", chat_lines(3))}
        )
        assert up.status_code == 200 and schema_errors(up.json(), "OpenAIFile") == []
        file_id = up.json()["id"]
        made = await h.post(
            "/batches",
            json={"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                  "completion_window": "24h"},
        )  # fmt: skip
        assert made.status_code == 200 and schema_errors(made.json(), "Batch") == []
        done = await _finished(client, made.json()["id"])
        shown = (await h.get(f"/batches/{done.id}")).json()
        assert schema_errors(shown, "Batch") == [] and shown["status"] == "completed"
        for path, schema in (
            ("/files", "ListFilesResponse"),
            (f"/files/{file_id}", "OpenAIFile"),
            (f"/files/{shown['output_file_id']}", "OpenAIFile"),
            ("/batches?limit=1", "ListBatchesResponse"),
        ):
            got = await h.get(path)
            assert got.status_code == 200 and schema_errors(got.json(), schema) == [], path
        gone = await h.delete(f"/files/{file_id}")
        assert schema_errors(gone.json(), "DeleteFileResponse") == []
        missing = await h.get(f"/files/{file_id}/content")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "file_not_found"
    await client.close()


async def test_a_responses_batch_answers_each_line_with_a_response_object(served):
    _, client, _, _ = served
    rows = [
        {
            "custom_id": f"r-{i}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": "chat", "input": f"say {i}", "max_output_tokens": 3},
        }
        for i in range(5)
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    up = await client.files.create(file=("r.jsonl", io.BytesIO(data)), purpose="batch")
    batch = await client.batches.create(
        input_file_id=up.id, endpoint="/v1/responses", completion_window="24h"
    )
    done = await _finished(client, batch.id)
    assert done.status == "completed" and done.request_counts.completed == 5, done
    lines = [
        json.loads(x) for x in (await client.files.content(done.output_file_id)).text.splitlines()
    ]
    assert sorted(x["custom_id"] for x in lines) == [f"r-{i}" for i in range(5)]
    assert all(x["response"]["body"]["object"] == "response" for x in lines)
    await client.close()


async def test_a_projects_batches_are_capped_in_number_and_queued_bytes_with_a_429(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        # Slow answers: the first batch is still running while the next ones are asked for.
        base = await _serve(cluster, _spec("chat", "--ttft-ms", "200", "--tokens", "2"))
        async with cluster.admin() as admin:
            key = await admin.create_key(PROJECT)
            other = await admin.create_key(OTHER)
        client, elsewhere = _client(base, key.secret), _client(base, other.secret)
        caps = cluster.server.cfg.batches
        caps.max_active_per_project = 1
        lines = chat_lines(400)
        first_up = await client.files.create(file=("a.jsonl", io.BytesIO(lines)), purpose="batch")
        second_up = await client.files.create(file=("b.jsonl", io.BytesIO(lines)), purpose="batch")

        async def create(c, file_id: str):
            return await c.batches.create(
                input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
            )

        first = await create(client, first_up.id)
        with pytest.raises(openai.RateLimitError) as e:
            await create(client, second_up.id)
        assert e.value.code == "too_many_batches"
        assert "has 1 batches not yet ended" in e.value.message
        assert "batches.max_active_per_project" in e.value.message

        # The bytes queued: the first input and the second together are over the cap.
        caps.max_active_per_project = 10
        caps.max_queued_bytes_per_project = len(lines) + len(lines) // 2
        with pytest.raises(openai.RateLimitError) as e:
            await create(client, second_up.id)
        assert e.value.code == "batch_queue_full" and e.value.param == "input_file_id"
        assert "batches.max_queued_bytes_per_project" in e.value.message
        # Another project's queue is its own.
        other_up = await elsewhere.files.create(
            file=("c.jsonl", io.BytesIO(lines)), purpose="batch"
        )
        theirs = await create(elsewhere, other_up.id)
        await elsewhere.batches.cancel(theirs.id)

        # Once the first has ended, the second fits.
        await client.batches.cancel(first.id)
        assert (await _finished(client, first.id)).status == "cancelled"
        second = await create(client, second_up.id)
        assert second.status == "validating"
        await client.batches.cancel(second.id)
        await client.close()
        await elsewhere.close()
