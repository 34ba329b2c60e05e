"""The client API's hot path: key, model, replica, forward, relay — and its overhead.

An ASGI handler for ``/v1/…``. Requests go to a ready replica of the model
through one aiohttp client session (a connection pool per replica host:
measured here, aiohttp added a third of httpx's latency on this path). A
replica that fails before any byte reached the client is retried on the
next one; streams are relayed chunk by chunk as they arrive. Every answer
carries ``x-llmgw-overhead-ms``: the time spent here, the engine's excluded.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

import aiohttp

from gatewayd.gateway import messages
from gatewayd.gateway.anthropic_request import AnthropicRequestError
from gatewayd.gateway.errors import ApiError
from gatewayd.gateway.keys import KeyCache, KeyInfo
from gatewayd.gateway.limits import LimitTable, Refusal, Ticket
from gatewayd.gateway.metrics import GatewayMetrics
from gatewayd.gateway.router import Router

log = logging.getLogger(__name__)

# Bodies larger than this are refused before they are read whole (413).
MAX_BODY_BYTES = 32 * 2**20
FORWARDED = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/messages"}
# How long to wait for an engine to answer at all; a stream may then run long.
CONNECT_TIMEOUT_S = 5.0
RETRY_AFTER_NO_REPLICA_S = 10


class Gateway:
    def __init__(
        self,
        keys: KeyCache,
        router: Router,
        *,
        engine_key: str,
        models: Callable[[], list[tuple[str, bool]]],
        known: Callable[[str], bool],
        metrics: GatewayMetrics | None = None,
    ):
        self._keys = keys
        self._router = router
        self._engine_key = engine_key
        # (name, loaded) of every catalog model; whether a name is in the catalog.
        self._models = models
        self._known = known
        self._http: aiohttp.ClientSession | None = None
        self._limits = LimitTable()
        self.metrics = metrics

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            auto_decompress=False,
        )

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    # ---- ASGI -------------------------------------------------------------

    async def __call__(self, scope, receive, send) -> None:
        t0 = time.perf_counter()
        clock = _Clock(t0)
        seen = {"status": 0, "model": ""}

        async def send(message, _send=send):
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            await _send(message)

        if self.metrics is not None:
            self.metrics.in_flight.inc()
        try:
            await self._handle(scope, receive, send, clock, seen)
        finally:
            if self.metrics is not None:
                self.metrics.in_flight.dec()
                total = time.perf_counter() - t0
                self.metrics.observe(
                    seen["model"], seen["status"] or 499, total, max(total - clock.upstream_s, 0.0)
                )

    async def _handle(self, scope, receive, send, clock, seen) -> None:
        try:
            key = self._authenticate(scope)
            path, method = scope["path"], scope["method"]
            if path == "/v1/models" and method == "GET":
                await _send_json(send, 200, self._list_models(key), clock)
                return
            if path not in FORWARDED:
                raise ApiError(404, f"no route for {method} {path}", code="unknown_route")
            if method != "POST":
                raise ApiError(405, f"{path} takes POST", code="method_not_allowed")
            body = await _read_body(receive, scope)
            anthropic_request = None
            if path == "/v1/messages":
                try:
                    anthropic_request, chat = messages.to_chat(body)
                except AnthropicRequestError as e:
                    raise ApiError(400, str(e), code="invalid_request", param=e.field) from None
                path, body = "/v1/chat/completions", json.dumps(chat).encode()
            request = _parse(body)
            model = seen["model"] = request["model"]
            if not self._known(model):
                raise ApiError(
                    404,
                    f"the model {model!r} does not exist",
                    code="model_not_found",
                    param="model",
                )
            if not key.allows(model):
                raise ApiError(
                    403,
                    f"this API key may not use the model {model!r}",
                    code="model_not_allowed",
                    param="model",
                )
            ticket = self._admit(key, request, len(body))
            session = _session(scope, request)
            await self._forward(path, body, model, session, send, clock, ticket, anthropic_request)
        except ApiError as e:
            await _send_error(send, e, clock, anthropic=scope["path"] == "/v1/messages")

    def _authenticate(self, scope) -> KeyInfo:
        token = ""
        for name, value in scope["headers"]:
            if name == b"authorization":
                v = value.decode("latin-1")
                if v[:7].lower() == "bearer ":
                    token = v[7:].strip()
            elif name == b"x-api-key" and not token:
                token = value.decode("latin-1").strip()
        if not token:
            raise ApiError(
                401, "no API key: send it as 'Authorization: Bearer <key>'", code="missing_api_key"
            )
        info = self._keys.lookup(token)
        if info is None:
            raise ApiError(401, "this API key is not valid", code="invalid_api_key")
        refusal = info.refusal(datetime.now(UTC))
        if refusal:
            raise ApiError(401, refusal, code="invalid_api_key")
        return info

    def _admit(self, key: KeyInfo, request: dict, body_bytes: int) -> Ticket:
        """The key's requests and tokens per minute; 429 with Retry-After when spent."""
        max_tokens = request.get("max_tokens") or request.get("max_completion_tokens") or 0
        # ~4 bytes a token for the prompt, plus what the answer may use;
        # corrected from the answer's usage.
        est = body_bytes // 4 + (max_tokens if isinstance(max_tokens, int) else 0)
        outcome = self._limits.admit([(f"key:{key.key_id}", key.limits)], est)
        if isinstance(outcome, Refusal):
            raise ApiError(
                429, outcome.message, code="rate_limited", retry_after_s=outcome.retry_after_s
            )
        return outcome

    def _list_models(self, key: KeyInfo) -> dict:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "llmgw", "loaded": loaded}
            for name, loaded in self._models()
            if key.allows(name)
        ]
        return {"object": "list", "data": data}

    async def _forward(
        self, path, body, model, session, send, clock, ticket, anthropic_request=None
    ) -> None:
        targets = self._router.candidates(model, session)
        if not targets:
            raise ApiError(
                503,
                f"no replica of {model!r} is ready yet",
                code="no_replica_ready",
                retry_after_s=RETRY_AFTER_NO_REPLICA_S,
            )
        headers = {
            "content-type": "application/json",
            "authorization": f"Bearer {self._engine_key}",
        }
        last_error = ""
        for target in targets:
            self._router.begin(target)
            try:
                started = clock.upstream_begin()
                try:
                    resp = await self._http.post(target.base_url + path, data=body, headers=headers)
                except (aiohttp.ClientError, OSError, TimeoutError) as e:
                    clock.upstream_end(started)
                    last_error = f"{target.replica_id}: {e.__class__.__name__}"
                    log.warning(
                        "replica %s failed before answering (%s); trying the next",
                        target.replica_id,
                        e,
                    )
                    continue  # nothing reached the client: another replica may answer
                clock.upstream_end(started)
                async with resp:
                    if anthropic_request is not None:
                        await messages.relay(resp, anthropic_request, send, clock.header)
                    else:
                        await self._relay(resp, send, clock, ticket)
                return
            finally:
                self._router.end(target)
        raise ApiError(
            503,
            f"no replica of {model!r} answered ({last_error})",
            code="no_replica_answered",
            retry_after_s=RETRY_AFTER_NO_REPLICA_S,
        )

    async def _relay(self, resp: aiohttp.ClientResponse, send, clock, ticket) -> None:
        ctype = resp.headers.get("content-type", "application/json")
        headers = [(b"content-type", ctype.encode())]
        if ctype.startswith("text/event-stream"):
            headers.append((b"cache-control", b"no-cache"))
            headers.append(clock.header())
            await send({"type": "http.response.start", "status": resp.status, "headers": headers})
            async for chunk in resp.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        started = clock.upstream_begin()
        data = await resp.read()
        clock.upstream_end(started)
        ticket.settle(_total_tokens(data))
        headers += [(b"content-length", str(len(data)).encode()), clock.header()]
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


class _Clock:
    """Time spent in the gateway: everything since the request arrived but the engine's."""

    __slots__ = ("t0", "upstream_s")

    def __init__(self, t0: float):
        self.t0, self.upstream_s = t0, 0.0

    def upstream_begin(self) -> float:
        return time.perf_counter()

    def upstream_end(self, started: float) -> None:
        self.upstream_s += time.perf_counter() - started

    def header(self) -> tuple[bytes, bytes]:
        ms = (time.perf_counter() - self.t0 - self.upstream_s) * 1000
        return b"x-llmgw-overhead-ms", f"{max(ms, 0):.3f}".encode()


def _total_tokens(data: bytes) -> int:
    try:
        usage = json.loads(data).get("usage") or {}
        return int(usage.get("total_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0


def _session(scope, request: dict) -> str:
    for name, value in scope["headers"]:
        if name == b"x-llmgw-session":
            return value.decode("latin-1")
    user = request.get("user")
    return user if isinstance(user, str) else ""


async def _read_body(receive, scope) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY_BYTES:
            raise ApiError(
                413, f"the body is over {MAX_BODY_BYTES // 2**20} MiB", code="body_too_large"
            )
    chunks, size = [], 0
    while True:
        msg = await receive()
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(
                413, f"the body is over {MAX_BODY_BYTES // 2**20} MiB", code="body_too_large"
            )
        chunks.append(chunk)
        if not msg.get("more_body"):
            return b"".join(chunks)


def _parse(body: bytes) -> dict:
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not valid JSON", code="invalid_json") from None
    if not isinstance(request, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(
            400, "'model' must be a non-empty string", code="invalid_type", param="model"
        )
    if "stream" in request and not isinstance(request["stream"], bool):
        raise ApiError(400, "'stream' must be true or false", code="invalid_type", param="stream")
    return request


async def _send_json(send, status: int, payload: dict, clock: _Clock) -> None:
    data = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                clock.header(),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _send_error(send, e: ApiError, clock: _Clock, *, anthropic: bool = False) -> None:
    # Each API answers errors in its own shape: the SDKs read them.
    data = messages.error_bytes(e.status, e.message) if anthropic else e.body()
    await send(
        {
            "type": "http.response.start",
            "status": e.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                clock.header(),
                *e.headers(),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
