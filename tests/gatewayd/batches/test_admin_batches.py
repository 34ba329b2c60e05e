"""ListBatches, GetBatch and CancelBatch against a real gatewayd, on both store backends."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.batches.objects import new_id
from gatewayd.store.batch_records import FileRecord
from proto.llmgw.v1 import GetBatchRequest, ListBatchesRequest
from tests.cluster_fixture import cluster  # noqa: F401  (a gatewayd per backend)


async def _made(cluster, project="local/default/default"):  # noqa: F811
    book = cluster.server.batches
    now = datetime.now(UTC)
    tenancy = cluster.server.keys.tenancy
    if tenancy.get(project) is None:
        await tenancy.create("project", project, parents=True)
    project_id = tenancy.get(project).id
    # One request for a model with no room: the batch stays cancellable until cancelled.
    cluster.server.batch_runner._room = lambda model: 0
    line = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "chat", "messages": []}}).encode() + b"\n"  # fmt: skip
    file_id = new_id("file-")
    await cluster.server.store.put_file_chunk(file_id, 0, line)
    await cluster.server.store.put_file(
        FileRecord(file_id=file_id, project_id=project_id, filename="in.jsonl",
                   purpose="batch", bytes=len(line), created_at=now)
    )  # fmt: skip
    request = {
        "input_file_id": file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        "metadata": {"job": "nightly"},
    }
    return await book.create(project_id, "key_a", request)


async def test_admin_lists_shows_and_cancels_a_batch(cluster):  # noqa: F811
    made = await _made(cluster)
    async with cluster.admin() as admin:
        stub = admin._stub
        listed = await stub.list_batches(ListBatchesRequest())
        assert [b.id for b in listed.batches] == [made.batch_id]
        view = listed.batches[0]
        assert view.project == "local/default/default" and view.endpoint == "/v1/chat/completions"
        assert view.metadata == {"job": "nightly"} and view.completion_window == "24h"
        assert view.created_at and view.expires_at and view.completed_at == ""

        shown = await stub.get_batch(GetBatchRequest(id=made.batch_id))
        assert shown.id == made.batch_id
        assert (await stub.list_batches(ListBatchesRequest(project="other/a/b"))).batches == []

        cancelled = await stub.cancel_batch(GetBatchRequest(id=made.batch_id))
        assert cancelled.status in ("cancelling", "cancelled") and cancelled.cancelling_at

        with pytest.raises(GRPCError) as missing:
            await stub.get_batch(GetBatchRequest(id="batch_nope"))
        assert missing.value.status == Status.NOT_FOUND
        assert "llmgw ctl batches list" in missing.value.message
        with pytest.raises(GRPCError) as bad:
            await stub.list_batches(ListBatchesRequest(status="sleeping"))
        assert bad.value.status == Status.INVALID_ARGUMENT
