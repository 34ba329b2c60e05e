"""An engine killed in the middle of a stream: the client's SDK raises an error saying so,
the request is accounted as failed (not answered), and gatewayd logs no traceback.
Through a real gatewayd and a sim replica killed with SIGKILL, the official SDKs as clients."""

from __future__ import annotations

import logging
import os
import signal

import anthropic
import openai
import pytest

from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

PROJECT = "Acme/ml/streams"
# Slow enough that a stream is still going when its engine is killed.
SLOW = ["--ttft-ms", "10", "--itl-ms", "50", "--tokens", "400"]


def _spec() -> ModelSpec:
    return ModelSpec(
        name="chat",
        source="/models/none.gguf",
        replicas_min=1,
        replicas_max=1,
        slots=4,
        profiles=[ModelProfile(name="default", engine="sim", startup_timeout_s=60, args=SLOW)],
    )


async def _ready_pid(admin, not_pid: int = 0) -> int:
    async def ready():
        for r in (await admin.list_replicas("chat")).replicas:
            if r.state == "ready" and r.pid and r.pid != not_pid:
                return r.pid
        return None

    return await wait_for(ready, attempts=600)


async def test_a_stream_whose_engine_dies_ends_in_an_error_and_is_not_counted_answered(
    tmp_path, caplog
):
    caplog.set_level(logging.WARNING)
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("cpu-node")
        async with cluster.admin() as admin:
            await admin.put_model(_spec())
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
            pid = await _ready_pid(admin)
        port = cluster.server.ports["http"]
        gpt = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=key.secret, max_retries=0
        )
        stream = await gpt.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        got = []
        with pytest.raises(openai.APIError) as err:
            async for chunk in stream:
                got.append(chunk)
                if len(got) == 3:
                    os.killpg(pid, signal.SIGKILL)
        assert "broke off its answer" in err.value.message
        assert len(got) >= 3  # what came before the break reached the client
        await gpt.close()

        async with cluster.admin() as admin:
            pid = await _ready_pid(admin, not_pid=pid)
        claude = anthropic.AsyncAnthropic(
            base_url=f"http://127.0.0.1:{port}", api_key=key.secret, max_retries=0
        )
        events = []
        with pytest.raises(anthropic.APIStatusError) as err:
            async with claude.messages.stream(
                model="chat", max_tokens=400, messages=[{"role": "user", "content": "hi"}]
            ) as s:
                async for event in s:
                    events.append(event.type)
                    if event.type == "content_block_delta" and events.count(event.type) == 3:
                        os.killpg(pid, signal.SIGKILL)
        assert "broke off its answer" in str(err.value)
        assert events[0] == "message_start"
        await claude.close()

        async with cluster.admin() as admin:
            pid = await _ready_pid(admin, not_pid=pid)
        gpt = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=key.secret, max_retries=0
        )
        kinds = []
        async with await gpt.responses.create(model="chat", input="hi", stream=True) as s:
            async for event in s:
                kinds.append(event.type)
                if event.type == "response.output_text.delta" and kinds.count(event.type) == 3:
                    os.killpg(pid, signal.SIGKILL)
        assert kinds[-1] == "response.failed"
        await gpt.close()

        async with cluster.admin() as admin:

            async def both_rows():
                rows = [r async for r in admin.export_usage()]
                return rows if len(rows) == 3 else None

            rows = await wait_for(both_rows)
        assert [r.status for r in rows] == [502, 502, 502]
    broke = [r for r in caplog.records if "broke off a stream already relayed" in r.getMessage()]
    assert len(broke) == 3
    # No traceback of llmgw's own. Only its loggers: an SDK client of an earlier
    # test on this worker, collected meanwhile, closes itself on this loop and
    # asyncio says its old loop is closed, which is nothing this test did.
    ours = ("gatewayd", "agentd", "llmgw")
    assert [r.getMessage() for r in caplog.records if r.exc_info and r.name.startswith(ours)] == []
