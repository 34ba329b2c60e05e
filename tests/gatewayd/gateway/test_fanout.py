"""n > 1 and counting tokens against real sim engines; engines' refusals and failures as the client sees them."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from aiohttp import web

from agentd.sim.server import SimConfig, serve
from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.routing import fanout
from gatewayd.gateway.routing.count_tokens import TokenCounter
from gatewayd.gateway.routing.forward import Clock, Forwarder
from gatewayd.gateway.routing.router import Router, Target
from tests.gatewayd.gateway.fakes import Sent


@contextlib.asynccontextmanager
async def sim(**cfg):
    """A sim engine serving "m" on a free port, in this event loop."""
    stop = asyncio.Event()
    where: asyncio.Future = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(
            SimConfig(model="m", port=0, ttft_ms=0, itl_ms=0, **cfg),
            stop,
            lambda host, port: where.set_result(f"http://{host}:{port}"),
        )
    )
    try:
        yield await where
    finally:
        stop.set()
        await task


@contextlib.asynccontextmanager
async def forwarder(*targets: Target):
    router = Router(lambda m: list(targets), rng=lambda: 0.5)
    fwd = Forwarder(router, "ek")
    await fwd.start()
    try:
        yield router, fwd
    finally:
        await fwd.close()


def chat(**extra) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "tell me"}], **extra}


async def forward(fwd, request: dict, path="/v1/chat/completions"):
    sent = Sent()
    out = await fwd.forward(
        path, json.dumps(request).encode(), "m", "", sent, Clock(0), request=request
    )
    return sent, out


@pytest.mark.parametrize("engine", ["sim", "llama.cpp"])
async def test_n_choices_come_back_indexed_with_their_usage_summed(engine):
    # The sim takes n itself; for llama.cpp (which takes n only up to its slots)
    # the gateway asks n times and merges.
    async with sim() as url, forwarder(Target("r", url, engine=engine)) as (_, fwd):
        sent, out = await forward(fwd, chat(n=3, max_tokens=4))
        answer = sent.json()
        assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
        texts = {c["message"]["content"] for c in answer["choices"]}
        assert len(texts) == (3 if engine == "sim" else 1)  # the sim seeds each choice apart
        assert answer["usage"]["completion_tokens"] == 12 == out.completion_tokens
        assert answer["usage"]["total_tokens"] == out.total_tokens


@pytest.mark.parametrize("engine", ["sim", "llama.cpp"])
async def test_a_stream_of_n_choices_carries_each_chunk_with_its_index_and_one_usage(engine):
    async with sim() as url, forwarder(Target("r", url, engine=engine)) as (_, fwd):
        request = chat(n=2, max_tokens=3, stream=True, stream_options={"include_usage": True})
        sent, out = await forward(fwd, request)
        frames = [f for f in sent.body.split(b"\n\n") if f]
        assert frames[-1] == b"data: [DONE]" and frames.count(b"data: [DONE]") == 1
        chunks = [json.loads(f.removeprefix(b"data: ")) for f in frames[:-1]]
        text = {0: "", 1: ""}
        for chunk in chunks:
            assert chunk["model"] == "m" and chunk["id"] == chunks[0]["id"]
            for choice in chunk["choices"]:
                text[choice["index"]] += choice["delta"].get("content") or ""
        assert text[0] and text[1]
        usage = [c for c in chunks if c.get("usage")]
        assert len(usage) == 1 and usage[0]["choices"] == []
        assert usage[0]["usage"]["completion_tokens"] == 6 == out.completion_tokens


async def test_token_ids_past_the_models_vocabulary_are_refused_naming_the_field():
    async with sim() as url, forwarder(Target("r", url, engine="sim", vocab_size=259)) as (_, fwd):
        request = {"model": "m", "input": [[1, 2], [3, 259]]}
        with pytest.raises(ApiError) as err:
            await forward(fwd, request, "/v1/embeddings")
        assert err.value.status == 400 and err.value.param == "input[1][1]"
        assert "vocabulary of 259 tokens" in err.value.message
        sent, _ = await forward(fwd, {"model": "m", "input": [[1, 258]]}, "/v1/embeddings")
        assert sent.status == 200


class FakeLlamaServer:
    """llama.cpp's /apply-template and /tokenize, and a chat endpoint that answers as told."""

    def __init__(self, status: int = 200, error: str = "") -> None:
        self.status, self.error = status, error
        self.url = ""
        self.seen: list[str] = []

    async def apply_template(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append("apply-template")
        text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in body["messages"])
        return web.json_response({"prompt": text + "<|assistant|>"})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append(f"tokenize add_special={body.get('add_special')}")
        return web.json_response({"tokens": list(range(len(body["content"].split("\n"))))})

    async def chat(self, request: web.Request) -> web.Response:
        self.seen.append("chat")
        error = {"code": self.status, "message": self.error, "type": "server_error"}
        return web.json_response({"error": error}, status=self.status)

    @contextlib.asynccontextmanager
    async def running(self):
        app = web.Application()
        app.router.add_post("/apply-template", self.apply_template)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/chat/completions", self.chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            yield self
        finally:
            await runner.cleanup()


# A system prompt and a user turn: three lines once templated (system, user, assistant).
COUNTED = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "one two three"},
    ],
}


async def test_tokens_are_counted_by_llama_cpps_template_and_tokenizer():
    llama = FakeLlamaServer()
    async with llama.running(), forwarder(Target("r", llama.url, engine="llama.cpp")) as fwds:
        router, fwd = fwds
        assert await TokenCounter(router, fwd.post, lambda m: True).count("m", COUNTED) == 3
    assert llama.seen == ["apply-template", "tokenize add_special=True"]


async def test_tokens_are_counted_by_the_sims_tokenize_from_the_chat_messages():
    async with sim() as url, forwarder(Target("r", url, engine="sim")) as (router, fwd):
        # The sim's token is a word: "be brief" and "one two three".
        assert await TokenCounter(router, fwd.post, lambda m: True).count("m", COUNTED) == 5


async def test_an_engines_refusal_is_a_400_in_its_words_and_not_tried_elsewhere():
    refusing = FakeLlamaServer(400, "Prompt contains invalid tokens")
    other = FakeLlamaServer()
    async with refusing.running(), other.running():
        targets = (Target("a", refusing.url), Target("b", other.url))
        async with forwarder(*targets) as (_, fwd):
            with pytest.raises(ApiError) as err:
                await forward(fwd, chat())
    assert err.value.status == 400 and err.value.message == "Prompt contains invalid tokens"
    assert json.loads(err.value.body())["error"]["code"] is None
    assert other.seen == []


async def test_an_engine_failing_is_tried_on_the_next_replica_and_a_502_when_all_fail():
    failing = FakeLlamaServer(500, "out of memory")
    async with failing.running(), sim() as url:
        async with forwarder(Target("a", failing.url), Target("b", url, engine="sim")) as (_, fwd):
            sent, out = await forward(fwd, chat(max_tokens=2))
            assert sent.status == 200 and out.target.replica_id == "b"
        async with forwarder(Target("a", failing.url), Target("a2", failing.url)) as (_, fwd):
            with pytest.raises(ApiError) as err:
                await forward(fwd, chat())
    assert err.value.status == 502 and err.value.code == "upstream_error"
    assert "out of memory" in err.value.message and "tried 2 replicas" in err.value.message
    assert failing.seen == ["chat", "chat", "chat"]


async def test_several_prompts_fanned_out_are_numbered_as_openai_numbers_them():
    # Prompt p's choice c is index p * n + c: two prompts, n=2, two sub-requests.
    sent = Sent()
    merge = fanout.Merge(2, sent, stream=False, include_usage=False)
    for sub in (0, 1):
        answer = {
            "id": "cmpl-1",
            "object": "text_completion",
            "choices": [{"index": p, "text": f"prompt {p} choice {sub}"} for p in (0, 1)],
        }
        send = merge.send_for(sub)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(answer).encode()})
    await merge.finish({"prompt_tokens": 4}, lambda: (b"x-llmgw-overhead-ms", b"0"))
    choices = sent.json()["choices"]
    assert [(c["index"], c["text"]) for c in choices] == [
        (0, "prompt 0 choice 0"),
        (1, "prompt 0 choice 1"),
        (2, "prompt 1 choice 0"),
        (3, "prompt 1 choice 1"),
    ]
