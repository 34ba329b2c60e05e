"""The client API's hot path: key, model, replica, forward, relay — and its overhead.

An ASGI handler for ``/v1/…``: the key, the model, the limits and budgets of
the key's levels, the admission band, then ``Forwarder`` sends the request to
a replica (local replicas through a lean pooled HTTP/1.1 client, outside
providers through aiohttp) and relays the answer; usage and metrics are
recorded off the hot path. Every answer carries ``x-llmgw-overhead-ms``: the
time spent here, the engine's excluded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from gatewayd.gateway.metering.metrics import GatewayMetrics
from gatewayd.gateway.metering.usage import UsageRow, UsageWriter
from gatewayd.gateway.policy.admission import Busy
from gatewayd.gateway.policy.bands import BandPools
from gatewayd.gateway.policy.keys import KeyCache, KeyInfo
from gatewayd.gateway.policy.limits import LimitTable, Refusal, Ticket
from gatewayd.gateway.policy.pricing import BudgetTable, Price, cost_micros
from gatewayd.gateway.protocol import bounds, messages, validate
from gatewayd.gateway.protocol.anthropic_request import AnthropicRequestError
from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.protocol.replies import MAX_BODY_BYTES
from gatewayd.gateway.protocol.replies import error_event as _error_event
from gatewayd.gateway.protocol.replies import read_body as _read_body
from gatewayd.gateway.protocol.replies import send_error as _send_error
from gatewayd.gateway.protocol.replies import send_json as _send_json
from gatewayd.gateway.routing import count_tokens
from gatewayd.gateway.routing.demand import Demand
from gatewayd.gateway.routing.forward import BrokeOff, Clock, Forwarder, Outcome
from gatewayd.gateway.routing.router import Router, parse_profile
from llmgw.config import AdmissionConfig

log = logging.getLogger(__name__)

# Bodies larger than this are refused before they are read whole (413).
FREE = Price()
# No answer is estimated past this (a client's max_tokens may be any integer).
MAX_ESTIMATE_TOKENS = 10_000_000
# An OpenAI stream's last event: a client stops reading at it, so it is held too.
_DONE = b"data: [DONE]"
FORWARDED = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/messages"}


class _Request:
    """What one request came to, for metrics and the usage row."""

    __slots__ = ("batch_id", "cost", "key", "model", "outcome", "profile", "served", "status")

    def __init__(self) -> None:
        self.status = 0
        self.model = ""
        # The fallback that answered in the asked model's place ("": the model itself).
        self.served = ""
        self.key: KeyInfo | None = None
        self.outcome: Outcome | None = None
        self.profile = ""
        self.cost = 0
        self.batch_id = ""


class Call:
    """One authenticated client request, as a route handler gets it.

    ``send`` is the ASGI send (it notes the status for metrics); ``json`` and
    ``body`` answer and read in the gateway's way (size cap, overhead header).
    ``band`` forces an admission band (a batch's); ``req`` is what the usage
    row and metrics are made from: a handler that forwards through
    ``Gateway.complete`` fills it.
    """

    __slots__ = ("band", "clock", "key", "receive", "req", "scope", "send", "started")

    def __init__(self, scope, receive, send, clock: Clock, req: _Request, band: str | None):
        self.scope, self.receive, self.clock, self.req, self.band = (
            scope,
            receive,
            clock,
            req,
            band,
        )
        self.key: KeyInfo | None = None
        self.started = False

        async def sending(message, _send=send):
            if message["type"] == "http.response.start":
                self.started = True
            await _send(message)

        self.send = sending

    @property
    def method(self) -> str:
        return self.scope["method"]

    @property
    def path(self) -> str:
        return self.scope["path"]

    def header(self, name: bytes) -> str:
        return _header(self.scope, name)

    async def body(self, limit: int = 0) -> bytes:
        """The whole body; 413 past ``limit`` bytes (the gateway's cap by default)."""
        return await _read_body(self.receive, self.scope, limit or MAX_BODY_BYTES)

    async def json(self, status: int, payload: dict, headers=()) -> None:
        await _send_json(self.send, status, payload, self.clock, headers)

    async def error(self, e: ApiError) -> None:
        await _send_error(self.send, e, self.clock, anthropic=_anthropic(self.path))


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
        prices: Callable[[str], Price] | None = None,
        budgets: BudgetTable | None = None,
        bands: BandPools | None = None,
        usage: UsageWriter | None = None,
        engine_tls=None,
    ):
        """``engine_tls``: the client side of the nodes' engine doors (None: loopback only)."""
        self._keys = keys
        self._router = router
        self._engine_key = engine_key
        # (name, loaded) of every catalog model; whether a name is in the catalog.
        self._models = models
        self._known = known
        self._forwarder = Forwarder(router, engine_key, tls=engine_tls)
        self._limits = LimitTable()
        self.metrics = metrics
        self._prices = prices or (lambda _model: FREE)
        self.budgets = budgets if budgets is not None else BudgetTable()
        self.bands = bands if bands is not None else BandPools(AdmissionConfig(), lambda _m: 0)
        # Rows written in batches, off the hot path.
        self._usage = usage
        self._clients: dict[str, int] = {}
        # Models at min 0: requests held while a replica starts (server.py sets it).
        self.demand: Demand | None = None
        # A model's fallbacks, in order (server.py reads them from the catalog).
        self.fallbacks: Callable[[str], list[str]] = lambda _model: []
        self._routes: list[tuple[str, Callable[[Call], Awaitable[None]]]] = []
        self.add_route(
            count_tokens.PATH,
            count_tokens.TokenCounter(
                router, self._forwarder.post, known, admit=lambda key: self._admit(key, {}, 0)
            ),
        )

    async def start(self) -> None:
        await self._forwarder.start()

    async def close(self) -> None:
        if self.demand is not None:
            await self.demand.close()
        await self._forwarder.close()

    def clients_in_flight(self, model: str) -> int:
        """Clients' requests of ``model`` in flight or waiting in a band (batches' not counted)."""
        return self._clients.get(model, 0)

    # ---- routes -----------------------------------------------------------

    def add_route(self, prefix: str, handler: Callable[[Call], Awaitable[None]]) -> None:
        """Serve ``prefix`` and everything under it (``/v1/files`` → ``/v1/files/{id}``…)
        with ``handler``; it gets the authenticated ``Call`` and answers it."""
        self._routes.append((prefix, handler))

    # ---- ASGI -------------------------------------------------------------

    async def __call__(self, scope, receive, send) -> None:
        await self._serve(scope, receive, send)

    async def internal(
        self,
        key: KeyInfo,
        path: str,
        body: bytes,
        *,
        batch_id: str = "",
        on_usage: Callable[[UsageRow], None] | None = None,
    ) -> tuple[int, bytes]:
        """A request made on a key's behalf inside gatewayd (a batch's): the same checks,
        limits, budgets, metering and metrics as a client's, in the lowest admission band
        and the ``batch`` routing profile. Answers (status, body); a stream's body is its
        events as sent. ``on_usage`` takes the request's usage row instead of the usage
        writer: a batch writes it in the transaction that records the answer."""
        scope = {
            "type": "http",
            "method": "POST",
            "path": path,
            "headers": [(b"content-type", b"application/json"), (b"x-llmgw-profile", b"batch")],
        }
        sent = False

        async def receive():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        status, chunks = 0, []

        async def capture(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self._serve(
            scope,
            receive,
            capture,
            key=key,
            band=self.bands.lowest(),
            batch_id=batch_id,
            on_usage=on_usage,
        )
        return status, b"".join(chunks)

    async def _serve(
        self, scope, receive, send, *, key=None, band=None, batch_id="", on_usage=None
    ) -> None:
        t0 = time.perf_counter()
        clock = Clock(t0)
        req = _Request()
        req.batch_id = batch_id
        usage = self._usage if on_usage is None else None
        # With a usage journal, the answer's end (its last message, or from a stream's
        # [DONE] on) waits here until the request's row is on disk: a client that was
        # answered is accounted even if the process is killed right after.
        held: list | None = [] if usage is not None and usage.journal is not None else None
        out = send

        async def send(message, _send=out):
            if message["type"] == "http.response.start":
                req.status = message["status"]
            elif held is not None and (
                held or not message.get("more_body") or _DONE in message.get("body", b"")
            ):
                held.append(message)
                return
            await _send(message)

        metrics = self.metrics
        if metrics is not None:
            metrics.in_flight.inc()
        call = Call(scope, receive, send, clock, req, band)
        try:
            await self._handle(call, key)
        finally:
            total = time.perf_counter() - t0
            status = req.status or 499
            if metrics is not None:
                metrics.in_flight.dec()
                metrics.observe(req.model, status, total, max(total - clock.upstream_s, 0.0))
                if req.outcome is not None:
                    metrics.observe_answer(req.model, req.outcome)
            if req.key is not None and on_usage is not None:
                on_usage(_usage_row(req, status, total))
            elif req.key is not None and usage is not None:
                durable = usage.add(_usage_row(req, status, total))
                if durable is not None:
                    # Shielded: the group's future is shared with other requests.
                    await asyncio.shield(durable)
            if held:
                for message in held:
                    await out(message)

    async def _handle(self, call: Call, key: KeyInfo | None) -> None:
        scope = call.scope
        try:
            key = call.key = call.req.key = key or self._authenticate(scope)
            path, method = scope["path"], scope["method"]
            if path == "/v1/models" and method == "GET":
                await call.json(200, self._list_models(key))
                return
            if path.startswith("/v1/models/") and method == "GET":
                await call.json(200, self._model(key, path.removeprefix("/v1/models/")))
                return
            for prefix, handler in self._routes:
                if path == prefix or path.startswith(prefix + "/"):
                    await handler(call)
                    return
            if path not in FORWARDED:
                raise ApiError(404, f"no route for {method} {path}", code="unknown_route")
            if method != "POST":
                raise ApiError(405, f"{path} takes POST", code="method_not_allowed")
            body = await call.body()
            anthropic_request = None
            if path == "/v1/messages":
                try:
                    anthropic_request, chat = messages.to_chat(body)
                except AnthropicRequestError as e:
                    raise ApiError(400, str(e), code="invalid_request", param=e.field) from None
                bounds.check_messages(anthropic_request)
                path, body = "/v1/chat/completions", json.dumps(chat).encode()
            request = validate.parse(body)
            validate.check(path, request)
            if anthropic_request is None:
                bounds.check(path, request)
            if path == "/v1/embeddings" and None in request.values():
                # OpenAI's description lets optional fields be null ("encoding_format":
                # null is the default float); llama.cpp's server refuses a null with a 500.
                request = {k: v for k, v in request.items() if v is not None}
                body = json.dumps(request).encode()
            await self.complete(call, path, body, request, anthropic_request=anthropic_request)
        except ApiError as e:
            if call.started:
                log.warning("an error after the answer began, not sent: %s", e.message)
                return
            await _send_error(call.send, e, call.clock, anthropic=_anthropic(scope["path"]))
        except BrokeOff as e:
            # The stream had begun: it ends with an error event the SDKs raise, and the
            # request is accounted as failed, not answered.
            call.req.status = 502
            await call.send(
                {
                    "type": "http.response.body",
                    "body": _error_event(e, anthropic=_anthropic(scope["path"])),
                    "more_body": False,
                }
            )

    async def complete(
        self,
        call: Call,
        path: str,
        body: bytes,
        request: dict,
        *,
        anthropic_request: dict | None = None,
        send=None,
    ) -> Outcome:
        """The model's checks, the key's limits and budgets, the admission band, then the
        answer forwarded to ``send`` (the call's own by default; a protocol adapter passes
        one that converts). ``body`` is ``request`` as JSON. Raises ApiError before any
        byte was sent."""
        key, req = call.key, call.req
        model = req.model = request["model"]
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
        profile = req.profile = parse_profile(_header(call.scope, b"x-llmgw-profile"))
        # The model, then its fallbacks in order: the next is tried when one has no room
        # (503) or the key's budget cannot pay for it.
        chain = [model, *self.fallbacks(model)]
        refusal: ApiError | None = None
        ticket = outcome = None
        try:
            for i, served in enumerate(chain):
                last = i == len(chain) - 1
                if served != model and not (self._known(served) and key.allows(served)):
                    continue  # a fallback this key may not use is passed over
                price = self._prices(served)
                spent = self.budgets.check(key.scopes, price=price)
                if spent is not None:
                    refusal = ApiError(
                        429,
                        spent.message,
                        code="budget_exceeded",
                        retry_after_s=spent.retry_after_s,
                    )
                    continue
                if ticket is None:
                    ticket = self._admit(key, request, len(body))
                try:
                    outcome = await self._forward(
                        call, path, body, request, served, anthropic_request, send, profile
                    )
                except ApiError as e:
                    if last or e.status != 503:
                        raise
                    refusal = e
                    continue
                if served != model:
                    req.served = served
                    log.info("%s answered in the place of %s (%s)", served, model, refusal.code)
                break
        finally:
            # A request that failed before an answer gives its estimate back.
            if ticket is not None:
                ticket.settle(outcome.total_tokens if outcome else 0)
        if outcome is None:
            raise refusal or ApiError(503, f"no replica of {model!r} is ready yet")
        cost = cost_micros(
            price, outcome.prompt_tokens, outcome.completion_tokens, outcome.cached_tokens
        )
        req.cost += cost
        self.budgets.record(key.scopes, cost)
        return outcome

    async def _forward(
        self, call: Call, path, body, request, model, anthropic_request, send, profile
    ) -> Outcome:
        """One model's turn: its on-demand start, its admission band, then the forward."""
        req = call.req
        if model != request["model"]:
            request = {**request, "model": model}
            body = json.dumps(request).encode()
            if anthropic_request is not None:
                anthropic_request = {**anthropic_request, "model": model}
        band = call.band or self.bands.band_of(call.key.band)
        # Clients' requests in flight per model, apart from batches': what a batch leaves room for.
        client = not req.batch_id
        # A request for n answers holds n of the replicas' slots, as n requests would.
        slots = answers(request)
        if client:
            self._clients[model] = self._clients.get(model, 0) + slots
        try:
            if self.demand is not None and self.demand.asked(model):
                await self.demand.hold(model, self.bands.queue_ttl(band))
            async with self.bands.enter(model, band, slots):
                outcome = req.outcome = await self._forwarder.forward(
                    path,
                    body,
                    model,
                    _session(call.scope, request),
                    send or call.send,
                    call.clock,
                    anthropic_request,
                    profile=profile,
                    request=request,
                )
        except Busy as e:
            raise ApiError(
                e.status,
                e.message,
                code="queue_full" if e.status == 503 else "queue_timeout",
                retry_after_s=e.retry_after_s,
            ) from None
        finally:
            if client:
                self._clients[model] -= slots
        return outcome

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
        """The key's requests and tokens per minute; 429 with Retry-After when spent.

        A request for ``n`` choices is ``n`` requests and may answer ``n`` times
        ``max_tokens``: one with n=128 was let through a key's 5 a minute and
        estimated as one answer's tokens.
        """
        max_tokens = request.get("max_tokens") or request.get("max_completion_tokens") or 0
        choices = answers(request)
        # ~4 bytes a token for the prompt, plus what the answers may use;
        # corrected from the answer's usage.
        answer = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 0
        est = body_bytes // 4 + min(choices * answer, MAX_ESTIMATE_TOKENS)
        outcome = self._limits.admit(
            key.scopes or [(f"key:{key.key_id}", key.limits)], est, requests=choices
        )
        if isinstance(outcome, Refusal):
            raise ApiError(
                429, outcome.message, code="rate_limited", retry_after_s=outcome.retry_after_s
            )
        return outcome

    def _list_models(self, key: KeyInfo) -> dict:
        data = [_model_object(name, loaded) for name, loaded in self._models() if key.allows(name)]
        return {"object": "list", "data": data}

    def _model(self, key: KeyInfo, name: str) -> dict:
        """One model (``GET /v1/models/{model}``); one the key may not use is not shown."""
        for known, loaded in self._models():
            if known == name and key.allows(name):
                return _model_object(name, loaded)
        raise ApiError(404, f"the model {name!r} does not exist", code="model_not_found")


def answers(request: dict) -> int:
    """How many answers a request asks the engine for: ``n``, or a completion's ``best_of``
    (candidates made to keep the best), 1 when neither is sent. Both are checked by then
    (``validate``, ``bounds``): at most 128 and 20."""
    count = 1
    for name in ("n", "best_of"):
        value = request.get(name)
        if type(value) is int and value > count:
            count = value
    return count


def _model_object(name: str, loaded: bool) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "llmgw", "loaded": loaded}


def _anthropic(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def _header(scope, wanted: bytes) -> str:
    for name, value in scope["headers"]:
        if name == wanted:
            return value.decode("latin-1").strip()
    return ""


def _session(scope, request: dict) -> str:
    session = _header(scope, b"x-llmgw-session")
    if session:
        return session
    user = request.get("user")
    return user if isinstance(user, str) else ""


def _usage_row(req: _Request, status: int, total_s: float) -> UsageRow:
    out = req.outcome
    target = out.target if out is not None else None
    return UsageRow(
        key_id=req.key.key_id,
        project=req.key.project,
        project_id=req.key.project_id,
        model=req.model,
        served_model=(target.upstream_model or req.served or req.model)
        if target is not None
        else "",
        replica=target.replica_id if target is not None else "",
        prompt_tokens=out.prompt_tokens if out is not None else 0,
        cached_tokens=out.cached_tokens if out is not None else 0,
        completion_tokens=out.completion_tokens if out is not None else 0,
        cost_micros=req.cost,
        latency_ms=total_s * 1000,
        ttft_ms=out.ttft_s * 1000 if out is not None and out.ttft_s is not None else None,
        status=status,
        profile=req.profile,
        batch_id=req.batch_id,
    )
