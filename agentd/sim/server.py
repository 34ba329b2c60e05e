"""The simulator's HTTP server: the OpenAI endpoints an engine serves, with no model behind them.

Answers take the time a real engine would: ``ttft_ms`` before the first
token, ``itl_ms`` between tokens, and a wait for a slot when
``max_concurrency`` requests already run. A word is a token, and the text is
drawn from a fixed word list seeded by the prompt, so the same prompt always
gets the same answer and usage counts can be checked by hand.

As vLLM does, it takes ``n`` (n choices, each its own text, streamed with
their index) and serves ``POST /tokenize`` (a prompt or chat messages; the
count, and a token id per word).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import math
import struct
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agentd.sim.metrics import CONTENT_TYPE, SimMetrics

log = logging.getLogger(__name__)

WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "small",
    "engines",
    "hum",
    "along",
    "under",
    "bright",
    "lamps",
    "and",
    "patient",
    "operators",
    "watch",
    "queues",
    "drain",
    "token",
    "by",
    "token",
)
# How long a stopping server lets streams in flight finish.
SHUTDOWN_GRACE_S = 1.0


@dataclass
class SimConfig:
    """How the simulator behaves; the command-line flags of ``python -m agentd.sim``."""

    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens: int = 32
    # 0: no limit. Otherwise requests past it wait, counted as waiting.
    max_concurrency: int = 0
    # 0: no limit. Otherwise a prompt plus completion past it is refused, as vLLM does.
    max_model_len: int = 0
    # /health answers 503 for this long after start, like an engine loading weights.
    load_ms: float = 0.0
    embedding_dim: int = 64
    # A secret: kept out of repr.
    api_key: str = field(default="", repr=False)


class ApiError(Exception):
    """An error answer in OpenAI's shape."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def response(self) -> web.Response:
        body = {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": None,
                "code": self.status,
            }
        }
        return web.json_response(body, status=self.status)


def count_tokens(text: str) -> int:
    """Tokens in a text, by the simulator's rule: one per word."""
    return len(text.split())


def completion_words(prompt: str, n: int) -> list[str]:
    """The ``n`` tokens the simulator answers ``prompt`` with; the same every time."""
    start = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "big")
    return [("" if i == 0 else " ") + WORDS[(start + i) % len(WORDS)] for i in range(n)]


def embedding_of(item: str, dim: int) -> list[float]:
    """A unit vector of ``dim`` floats derived from a hash of ``item``."""
    raw = b""
    block = 0
    while len(raw) < dim * 4:
        raw += hashlib.sha256(f"{block}:{item}".encode()).digest()
        block += 1
    values = [(v / 0xFFFFFFFF) * 2 - 1 for v in struct.unpack(f">{dim}I", raw[: dim * 4])]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _choices(body: dict[str, Any]) -> int:
    n = body.get("n")
    if n is None:
        return 1
    if type(n) is not int or not 1 <= n <= 128:
        raise ApiError(400, "n must be an integer from 1 to 128")
    return n


def _chat_prompt(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list")
    parts: list[str] = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            parts += [p.get("text", "") for p in content if isinstance(p, dict)]
    return " ".join(parts)


def _completion_prompt(prompt: Any) -> str:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return " ".join(str(t) for t in prompt)  # token ids: one token each
    raise ApiError(400, "prompt must be one string or one list of token ids")


class SimServer:
    """The aiohttp application of one simulated engine."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.metrics = SimMetrics(cfg.model, cfg.max_concurrency)
        self._slots = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
        self._started = time.monotonic()
        self._created = int(time.time())
        self.app = web.Application(middlewares=[self._errors_and_key])
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/metrics", self.metrics_page)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_post("/v1/embeddings", self.embeddings)
        self.app.router.add_post("/tokenize", self.tokenize)

    @web.middleware
    async def _errors_and_key(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        # Like vLLM, only /v1 asks for the key: health and metrics stay open
        # to the agent and the router's scraper.
        if self.cfg.api_key and request.path.startswith("/v1"):
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.cfg.api_key}".encode()):
                denied = ApiError(401, "a valid engine key is needed", "AuthenticationError")
                return denied.response()
        try:
            return await handler(request)
        except ApiError as e:
            return e.response()

    # --- plain endpoints ------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if (time.monotonic() - self._started) * 1000 < self.cfg.load_ms:
            return web.json_response({"status": "loading"}, status=503)
        return web.json_response({"status": "ok"})

    async def metrics_page(self, request: web.Request) -> web.Response:
        resp = web.Response(body=self.metrics.render())
        resp.headers["Content-Type"] = CONTENT_TYPE
        return resp

    async def models(self, request: web.Request) -> web.Response:
        entry: dict[str, Any] = {
            "id": self.cfg.model,
            "object": "model",
            "created": self._created,
            "owned_by": "llmgw-sim",
            "root": self.cfg.model,
            "parent": None,
        }
        if self.cfg.max_model_len:
            entry["max_model_len"] = self.cfg.max_model_len
        return web.json_response({"object": "list", "data": [entry]})

    # --- generation -------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        return await self._generate(request, body, _chat_prompt(body.get("messages")), chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        prompt = _completion_prompt(body.get("prompt"))
        return await self._generate(request, body, prompt, chat=False)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the body is not JSON: {e}") from e
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        model = body.get("model")
        if model not in (None, "", self.cfg.model):
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
        return body

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's /tokenize: ``prompt`` (or llama.cpp's ``content``), or chat ``messages``."""
        body = await self._body(request)
        if "messages" in body:
            text = _chat_prompt(body["messages"])
        else:
            text = body.get("prompt", body.get("content"))
            if not isinstance(text, str):
                raise ApiError(400, "prompt must be a string, or send messages")
        words = text.split()
        tokens = [int.from_bytes(hashlib.sha256(w.encode()).digest()[:2], "big") for w in words]
        return web.json_response(
            {"count": len(tokens), "max_model_len": self.cfg.max_model_len, "tokens": tokens}
        )

    def _plan(self, body: dict[str, Any], prompt_tokens: int) -> tuple[int, str]:
        """How many tokens to answer with, and why the answer ends."""
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ApiError(400, "max_tokens must be a positive integer")
        n, reason = self.cfg.tokens, "stop"
        if limit is not None and limit <= self.cfg.tokens:
            n, reason = limit, "length"
        if self.cfg.max_model_len and prompt_tokens + n > self.cfg.max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.cfg.max_model_len} tokens. "
                f"However, you requested {prompt_tokens + n} tokens ({prompt_tokens} in the "
                f"prompt, {n} in the completion).",
            )
        return n, reason

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """Hold one of max_concurrency slots, counted as waiting until it is free."""
        if self._slots is None:
            acquired = False
        else:
            self.metrics.waiting.inc()
            try:
                await self._slots.acquire()
            finally:
                self.metrics.waiting.dec()
            acquired = True
        self.metrics.started()
        try:
            yield
        finally:
            self.metrics.finished()
            if acquired:
                self._slots.release()

    async def _tokens(self, arrival: float, words: list[str]) -> AsyncIterator[str]:
        """The answer's tokens, each when a real engine would have it."""
        await asyncio.sleep(self.cfg.ttft_ms / 1000)
        self.metrics.ttft.observe(time.monotonic() - arrival)
        for i, word in enumerate(words):
            if i:
                await asyncio.sleep(self.cfg.itl_ms / 1000)
            self.metrics.generation_tokens.inc()
            yield word

    async def _generate(
        self, request: web.Request, body: dict[str, Any], prompt: str, *, chat: bool
    ) -> web.StreamResponse:
        arrival = time.monotonic()
        prompt_tokens = count_tokens(prompt)
        n, reason = self._plan(body, prompt_tokens)
        choices = _choices(body)
        # Choice 0 is the answer n=1 gets; each other its own, as sampling would give.
        texts = [completion_words(prompt if c == 0 else f"{prompt}#{c}", n) for c in range(choices)]
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n * choices,
            "total_tokens": prompt_tokens + n * choices,
        }
        head = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.cfg.model,
        }
        async with self._slot():
            self.metrics.prompt_tokens.inc(prompt_tokens)
            if body.get("stream"):
                options = body.get("stream_options") or {}
                resp, reason = await self._stream(
                    request,
                    head,
                    texts,
                    reason,
                    usage,
                    arrival,
                    chat,
                    include_usage=bool(options.get("include_usage")),
                )
            else:
                async for _ in self._tokens(arrival, texts[0]):
                    pass
                answers = []
                for c, words in enumerate(texts):
                    text = "".join(words)
                    if chat:
                        answer = {
                            "index": c,
                            "message": {"role": "assistant", "content": text},
                            "logprobs": None,
                            "finish_reason": reason,
                        }
                    else:
                        answer = {
                            "index": c,
                            "text": text,
                            "logprobs": None,
                            "finish_reason": reason,
                        }
                    answers.append(answer)
                resp = web.json_response({**head, "choices": answers, "usage": usage})
            self.metrics.e2e.observe(time.monotonic() - arrival)
            self.metrics.count_finish(reason)
            return resp

    async def _stream(
        self,
        request: web.Request,
        head: dict[str, Any],
        texts: list[list[str]],
        reason: str,
        usage: dict[str, int],
        arrival: float,
        chat: bool,
        *,
        include_usage: bool,
    ) -> tuple[web.StreamResponse, str]:
        """Send the answer as server-sent events; the response and how it finished."""
        head = {**head, "object": "chat.completion.chunk" if chat else "text_completion"}
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {**head, "choices": choices, **extra}
            if include_usage and "usage" not in extra:
                chunk["usage"] = None
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        def choice(
            c: int, text: str | None, finish: str | None, role: bool = False
        ) -> dict[str, Any]:
            if not chat:
                return {"index": c, "text": text or "", "logprobs": None, "finish_reason": finish}
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            return {"index": c, "delta": delta, "logprobs": None, "finish_reason": finish}

        every = range(len(texts))
        try:
            if chat:  # vLLM opens a chat stream with the role, before any token
                for c in every:
                    await send([choice(c, "", None, role=True)])
            i = 0
            async for _ in self._tokens(arrival, texts[0]):
                # vLLM sends each choice's token in a chunk of its own.
                for c in every:
                    await send([choice(c, texts[c][i], None)])
                i += 1
            for c in every:
                await send([choice(c, None if chat else "", reason)])
            if include_usage:
                await send([], usage=usage)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionResetError:
            # Counted as vLLM counts it: an abort, not a success.
            log.info("a client left during its stream")
            return resp, "abort"
        return resp, reason

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        raw = body.get("input")
        items = raw if isinstance(raw, list) and raw and not isinstance(raw[0], int) else [raw]
        if not items or not all(isinstance(i, (str, list)) for i in items):
            raise ApiError(400, "input must be a string, a list of strings or token ids")
        dim = body.get("dimensions") or self.cfg.embedding_dim
        if not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= 8192:
            raise ApiError(400, "dimensions must be an integer from 1 to 8192")
        texts = [i if isinstance(i, str) else " ".join(str(t) for t in i) for i in items]
        tokens = sum(count_tokens(t) for t in texts)
        async with self._slot():
            self.metrics.prompt_tokens.inc(tokens)
            await asyncio.sleep(self.cfg.ttft_ms / 1000)
        data = []
        for index, text in enumerate(texts):
            vector: Any = embedding_of(text, dim)
            if body.get("encoding_format") == "base64":  # what the openai SDK asks for
                vector = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": self.cfg.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )


async def serve(
    cfg: SimConfig, stop: asyncio.Event, on_ready: Callable[[str, int], None] | None = None
) -> None:
    """Serve ``cfg`` until ``stop`` is set; ``on_ready(host, port)`` once listening."""
    server = SimServer(cfg)
    runner = web.AppRunner(server.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port, shutdown_timeout=SHUTDOWN_GRACE_S)
    try:
        await site.start()
        host, port = runner.addresses[0][:2]
        if on_ready:
            on_ready(host, port)
        await stop.wait()
    finally:
        await runner.cleanup()
