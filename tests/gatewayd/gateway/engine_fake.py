"""An engine that counts what reaches it, and a gateway in this process in front of it.

``CountingEngine`` answers chat completions, completions, embeddings and
``/tokenize`` as the sim does, and counts the requests each path got, so a
test can say that a refused request never reached it. ``gateway_before``
builds a ``Gateway`` as gatewayd does (store, keys, router, admission bands)
and the official SDKs pointed at it through ASGI.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass

import anthropic
import httpx
import httpx2
import openai
from aiohttp import web

from gatewayd.gateway.policy.bands import BandPools
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.gateway.protocol.responses.handler import PREFIX as RESPONSES
from gatewayd.gateway.protocol.responses.handler import Responses
from gatewayd.gateway.proxy import Gateway
from gatewayd.gateway.routing.router import Router, Target
from gatewayd.http.app import make_app
from gatewayd.store import SqliteStore
from llmgw.config import AdmissionConfig

PROJECT = "acme/ml/search"
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


class CountingEngine:
    """A local HTTP server that answers as an engine and counts requests by path."""

    def __init__(self) -> None:
        self.hits: collections.Counter[str] = collections.Counter()
        self.bodies: list[dict] = []
        self.url = ""
        # Set: answers wait until it is set again (a test looks at what is in flight).
        self.held: asyncio.Event | None = None
        self.arrived = asyncio.Event()

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.hits[request.path] += 1
        self.bodies.append(body)
        self.arrived.set()
        if self.held is not None:
            await self.held.wait()
        head = {"id": "x1", "model": body.get("model", ""), "created": 0}
        n = body.get("n") or 1
        if request.path == "/v1/chat/completions":
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": "hi", "refusal": None},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
                for i in range(n)
            ]
            return web.json_response(
                {**head, "object": "chat.completion", "choices": choices, "usage": USAGE}
            )
        if request.path == "/v1/completions":
            choices = [
                {"index": i, "text": "hi", "finish_reason": "stop", "logprobs": None}
                for i in range(n)
            ]
            return web.json_response(
                {**head, "object": "text_completion", "choices": choices, "usage": USAGE}
            )
        if request.path == "/v1/embeddings":
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [
                {"object": "embedding", "index": i, "embedding": [0.1, 0.2]}
                for i in range(len(inputs))
            ]
            usage = {"prompt_tokens": 3, "total_tokens": 3}
            return web.json_response({"object": "list", "data": data, "usage": usage, **head})
        # /tokenize, as vLLM and the sim answer it for chat messages.
        return web.json_response({"count": 7, "tokens": list(range(7))})

    @contextlib.asynccontextmanager
    async def running(self):
        app = web.Application()
        app.router.add_post("/{path:.*}", self._answer)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            yield self
        finally:
            await runner.cleanup()

    @property
    def forwarded(self) -> int:
        return sum(self.hits.values())


@dataclass
class Front:
    """A gateway in this process and the SDKs that speak to it."""

    gateway: Gateway
    keys: KeyCache
    store: SqliteStore
    secret: str
    key_id: str
    openai: openai.AsyncOpenAI
    anthropic: anthropic.AsyncAnthropic
    http: httpx.AsyncClient


@contextlib.asynccontextmanager
async def gateway_before(tmp_path, engine: CountingEngine, *, slots: int = 0, **key_limits):
    """A gateway whose model "chat" is one sim replica at ``engine``; ``slots``: the
    replica's parallel slots (0: not held back by admission bands); ``key_limits``:
    rpm/tpm of the key the SDKs use."""
    store = SqliteStore(tmp_path / "llmgw.db")
    await store.open()
    keys = KeyCache(store)
    await keys.tenancy.create("project", PROJECT, parents=True)
    rec, secret = await keys.create(PROJECT, "tests", [], 0, **key_limits)
    await keys.refresh()
    ready = {"chat": [Target(replica_id="r1", base_url=engine.url, engine="sim")]}
    gateway = Gateway(
        keys,
        Router(lambda m: ready.get(m, [])),
        engine_key="k",
        models=lambda: [("chat", True)],
        known=ready.__contains__,
        bands=BandPools(AdmissionConfig(), lambda _m: slots),
    )
    await gateway.start()
    gateway.add_route(RESPONSES, Responses(gateway, store))
    app = make_app(is_leader=lambda: True, routable=lambda: (True, ""), gateway=gateway)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")
    # The anthropic SDK takes httpx2's client only.
    http2 = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    front = Front(
        gateway,
        keys,
        store,
        secret,
        rec.key_id,
        openai.AsyncOpenAI(
            base_url="http://gateway/v1", api_key=secret, max_retries=0, http_client=http
        ),
        anthropic.AsyncAnthropic(
            base_url="http://gateway", api_key=secret, max_retries=0, http_client=http2
        ),
        http,
    )
    try:
        yield front
    finally:
        await http.aclose()
        await http2.aclose()
        await gateway.close()
        await store.close()
