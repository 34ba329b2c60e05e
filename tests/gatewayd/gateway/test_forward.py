"""Forwarding: retries before the first byte, usage counted for every answer, streamed or not."""

from __future__ import annotations

import json

import pytest

from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.protocol.sse import UsageTap
from gatewayd.gateway.routing.forward import Clock, Forwarder, Outcome
from gatewayd.gateway.routing.router import Router, Target
from tests.gatewayd.gateway.fakes import Sent, Upstream


def chat(**extra) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    ).encode()


class Fwd:
    def __init__(self, *targets: Target) -> None:
        self.router = Router(lambda m: list(targets), rng=lambda: 0.5)
        self.fwd = Forwarder(self.router, "ek")

    async def __aenter__(self):
        await self.fwd.start()
        return self

    async def __aexit__(self, *exc):
        await self.fwd.close()

    async def send(self, body: bytes, **kw) -> tuple[Sent, Outcome]:
        sent = self.last_sent = Sent()
        out = await self.fwd.forward("/v1/chat/completions", body, "m", "", sent, Clock(0), **kw)
        return sent, out


DEAD = Target("dead", "http://127.0.0.1:9")


async def test_a_replica_that_cannot_be_reached_is_passed_over_for_the_next():
    async with Upstream().running() as up, Fwd(DEAD, Target("live", up.url)) as f:
        sent, out = await f.send(chat())
        assert sent.status == 200 and out.target.replica_id == "live"
        assert out.prompt_tokens == 3 and out.completion_tokens == 2 and out.ttft_s >= 0
    assert up.seen[0][0] == "Bearer ek"


async def test_a_replica_answering_503_is_passed_over_and_the_last_ones_failure_is_a_502():
    async with Upstream({"ek": 503}).running() as busy, Upstream().running() as up:
        async with Fwd(Target("busy", busy.url), Target("live", up.url)) as f:
            sent, out = await f.send(chat())
            assert sent.status == 200 and out.target.replica_id == "live"
        async with Fwd(Target("busy", busy.url)) as f:
            with pytest.raises(ApiError) as err:
                await f.send(chat())
            assert err.value.status == 502 and err.value.code == "upstream_error"
            # The engine's words reach the client; nothing was sent before the error.
            assert "(503): status 503" in err.value.message and f.last_sent.status == 0


async def test_none_answering_is_a_502_before_anything_was_sent():
    async with Fwd(DEAD) as f:
        with pytest.raises(ApiError) as err:
            await f.send(chat())
    assert err.value.status == 502 and err.value.code == "upstream_error"
    assert json.loads(err.value.body())["error"]["type"] == "server_error"


async def test_a_stream_is_asked_for_usage_and_the_usage_chunk_is_kept_from_a_client_that_did_not():
    async with Upstream().running() as up, Fwd(Target("r", up.url)) as f:
        sent, out = await f.send(chat(stream=True))
        events = sent.events()
        assert up.seen[-1][1]["stream_options"] == {"include_usage": True}
        assert all(e["choices"] for e in events)  # no usage-only chunk
        assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == "hi there"
        assert sent.body.endswith(b"data: [DONE]\n\n")
        assert (out.prompt_tokens, out.completion_tokens) == (3, 2)
        assert out.ttft_s is not None and f.router.ttft("r") == out.ttft_s

        sent, out = await f.send(chat(stream=True, stream_options={"include_usage": True}))
        assert sent.events()[-1]["usage"]["completion_tokens"] == 2
        assert out.completion_tokens == 2


async def test_an_anthropic_stream_and_message_fill_the_outcome():
    from gatewayd.gateway.protocol import messages

    async with Upstream().running() as up, Fwd(Target("r", up.url)) as f:
        request = {
            "model": "m",
            "max_tokens": 5,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        _, converted = messages.to_chat(json.dumps(request).encode())
        sent, out = await f.send(json.dumps(converted).encode(), anthropic_request=request)
        assert b"event: message_stop" in sent.body
        assert (out.prompt_tokens, out.completion_tokens) == (3, 2) and out.ttft_s is not None

        whole = {**request, "stream": False}
        _, converted = messages.to_chat(json.dumps(whole).encode())
        sent, out = await f.send(json.dumps(converted).encode(), anthropic_request=whole)
        assert sent.json()["usage"]["output_tokens"] == 2 and out.completion_tokens == 2


def test_the_usage_tap_handles_events_split_anywhere_and_crlf_engines():
    stream = (
        b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}\n\n'
        b"data: [DONE]\n\n"
    )
    for sep in (b"\n\n", b"\r\n\r\n"):
        data = stream.replace(b"\n\n", sep)
        for size in (1, 7, len(data)):
            out = Outcome()
            tap = UsageTap(out, drop_usage=True, sent_at=0.0)
            relayed = b"".join(tap.feed(data[i : i + size]) for i in range(0, len(data), size))
            relayed += tap.flush()
            assert b"prompt_tokens" not in relayed and relayed.endswith(b"[DONE]" + sep)
            assert relayed.count(b"data:") == 3
            assert (out.prompt_tokens, out.completion_tokens) == (4, 1) and out.ttft_s > 0
