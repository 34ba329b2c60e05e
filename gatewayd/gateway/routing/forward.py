"""Sending a request on to a replica (or an outside key) and relaying its answer — retries included.

``Forwarder.forward`` tries the router's candidates in order. A target that
fails before any byte reached the client — no connection, a 5xx or 429, the
answer cut before it was whole, an outside key refused (401) — is passed over
for the next one and its breaker told; once the answer has started, it is
relayed to the end. What happened comes back as an ``Outcome`` (who answered,
the status, the tokens used, the time to first token) for the caller's
accounting.

The client gets answers in OpenAI's shape whatever the engine wrote
(``protocol/conform.py``), and errors in the gateway's terms, never the
engine's: an engine refusing the request (its 4xx) is a 400 in the engine's
words; the last candidate failing too (5xx, no connection, a cut answer) is a
502 ``upstream_error`` — a 5xx from the gateway means the gateway or the
engine failed, never that the client sent something wrong. A 429 stays a 429.

The gateway's own replicas are reached through ``upstream.HttpClient``, a
pooled HTTP/1.1 client made for this one hop (the whole gateway took about a
fifth less CPU a request than through aiohttp's); outside providers (TLS,
proxies), and any replica not on plain http, through aiohttp.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

from gatewayd.gateway.protocol import conform, messages, validate
from gatewayd.gateway.protocol.conform_stream import Make
from gatewayd.gateway.protocol.errors import ApiError, engine_error
from gatewayd.gateway.protocol.sse import UsageTap, usage_into
from gatewayd.gateway.routing import fanout
from gatewayd.gateway.routing.router import Router, Target
from gatewayd.gateway.routing.upstream import HttpClient
from gatewayd.gateway.routing.upstream import Response as LocalResponse

log = logging.getLogger(__name__)

# An answer from a replica (upstream's) or from an outside provider (aiohttp's).
Response = LocalResponse | aiohttp.ClientResponse

# How long to wait for a connection to an engine; a stream may then run long.
CONNECT_TIMEOUT_S = 5.0
RETRY_AFTER_NO_REPLICA_S = 10
# Paths whose streams carry usage when asked (stream_options.include_usage).
USAGE_STREAMS = ("/v1/chat/completions", "/v1/completions")
# What is learnt of engines' chunks (conform_stream.Make), per replica, path and
# client model name; forgotten all at once past this many (replicas come and go).
MAKES_MAX = 4096
# Paths whose prompt or input may be token ids of the model's vocabulary.
TOKEN_PATHS = ("/v1/completions", "/v1/embeddings")
# upstream.UpstreamError is an OSError.
_NET_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


class BrokeOff(Exception):
    """The engine broke off a stream whose answer had already begun going to the client.

    Nothing can be retried then: the caller ends the client's stream with an
    error event in its API's shape and accounts the request as failed.
    """


@dataclass
class Outcome:
    """What one forwarded request came to."""

    target: Target | None = None
    status: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    # Seconds from sending to the first token of a stream, or to the start of
    # a whole answer; None if none came.
    ttft_s: float | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Clock:
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


class _Bodies:
    """The request body as each kind of target gets it, made once and only if needed.

    Streams are asked for their usage (the gateway counts tokens); an outside
    provider gets its own name of the model.
    """

    def __init__(self, path: str, body: bytes, request: dict | None, *, anthropic: bool):
        self.path = path
        self.drop_usage = False
        self._body = body
        self._request = request
        self._external: dict[str, bytes] = {}
        if b'"stream"' in body and path in USAGE_STREAMS:
            req = self.request() or {}
            options = req.get("stream_options")
            options = options if isinstance(options, dict) else {}
            if req.get("stream") is True and not options.get("include_usage"):
                self._request = {**req, "stream_options": {**options, "include_usage": True}}
                self._body = json.dumps(self._request).encode()
                # The Anthropic conversion reads usage itself and never relays chunks.
                self.drop_usage = not anthropic

    def request(self) -> dict | None:
        if self._request is None:
            try:
                parsed = json.loads(self._body)
            except (ValueError, UnicodeDecodeError):
                return None
            self._request = parsed if isinstance(parsed, dict) else None
        return self._request

    def for_target(self, target: Target) -> bytes:
        if not target.upstream_model:
            return self._body
        data = self._external.get(target.upstream_model)
        if data is None:
            req = self.request()
            if req is None or req.get("model") == target.upstream_model:
                data = self._body
            else:
                data = json.dumps({**req, "model": target.upstream_model}).encode()
            self._external[target.upstream_model] = data
        return data


def _external_headers(target: Target) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if target.authorization:
        headers["authorization"] = target.authorization
    return headers


class Forwarder:
    def __init__(self, router: Router, engine_key: str, *, tls: ssl.SSLContext | None = None):
        """``engine_key``: sent to a replica whose target names no key of its own (a
        bench upstream); ``tls``: the client side of the nodes' engine doors."""
        self._router = router
        self._engine_key = engine_key
        self._http: aiohttp.ClientSession | None = None
        self._local = HttpClient(
            f"Bearer {engine_key}" if engine_key else "",
            connect_timeout_s=CONNECT_TIMEOUT_S,
            tls=tls,
        )
        self._makes: dict[tuple[str, str, str], Make] = {}

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            auto_decompress=False,
        )

    async def close(self) -> None:
        self._local.close()
        if self._http is not None:
            await self._http.close()

    async def forward(
        self,
        path: str,
        body: bytes,
        model: str,
        session: str,
        send,
        clock: Clock,
        anthropic_request: dict | None = None,
        profile: str = "chat",
        request: dict | None = None,
    ) -> Outcome:
        """Send the request to the first candidate that answers and relay its answer.

        ``profile`` is the routing profile (``router.PROFILES``); ``request``
        the parsed body, if the caller has it (saves parsing it again).
        Raises ApiError before anything was sent to the client: 503 when no
        replica is ready, 502 when none answered, the engine's refusal (400),
        its 429.
        """
        targets = self._router.candidates(model, session, profile or "chat")
        if not targets:
            raise ApiError(
                503,
                f"no replica of {model!r} is ready yet",
                code="no_replica_ready",
                retry_after_s=RETRY_AFTER_NO_REPLICA_S,
            )
        bodies = _Bodies(path, body, request, anthropic=anthropic_request is not None)
        first = targets[0]
        if first.vocab_size and path in TOKEN_PATHS and bodies.request() is not None:
            validate.token_ids(path, bodies.request(), first.vocab_size)
        if anthropic_request is None and b'"n"' in body:
            n = fanout.choices_wanted(path, bodies.request(), first.engine, first.external)
            if n:
                return await self._fan_out(
                    n, path, bodies.request(), model, session, send, clock, profile
                )
        last_error = ""
        final = len(targets) - 1
        for i, target in enumerate(targets):
            self._router.begin(target)
            try:
                result = await self._try(
                    target, bodies, send, clock, anthropic_request, model, last=i == final
                )
            except ApiError as e:
                if e.status == 502 and final:
                    e.message += f"; tried {len(targets)} replicas"
                raise
            finally:
                self._router.end(target)
            if isinstance(result, Outcome):
                return result
            last_error = result
        tried = f"{len(targets)} replicas" if len(targets) > 1 else "its replica"
        raise ApiError(
            502,
            f"the engine serving {model!r} failed ({last_error}); tried {tried}: try again",
            code="upstream_error",
        )

    async def post(self, target: Target, path: str, payload: dict) -> tuple[int, bytes]:
        """One JSON request to a replica's own API (``/tokenize``…): (status, body).

        Raises OSError (or aiohttp's errors) when it cannot be reached.
        """
        data = json.dumps(payload).encode()
        if not target.external:
            resp = await self._local.post(
                target.base_url,
                path,
                data,
                authorization=target.authorization,
                peer_name=target.peer_name,
            )
        else:
            resp = await self._http.post(
                target.base_url + path, data=data, headers=_external_headers(target)
            )
        async with resp:
            return resp.status, await resp.read()

    async def _fan_out(
        self,
        n: int,
        path: str,
        request: dict,
        model: str,
        session: str,
        send,
        clock: Clock,
        profile: str,
    ) -> Outcome:
        """``n`` requests of one choice each, their answers merged (``fanout.py``)."""
        one = {k: v for k, v in request.items() if k != "n"}
        body = json.dumps(one).encode()
        options = one.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        merge = fanout.Merge(n, send, stream=one.get("stream") is True, include_usage=include_usage)
        clocks = [Clock(clock.t0) for _ in range(n)]
        results = await fanout.gather_all(
            [
                self.forward(
                    path,
                    body,
                    model,
                    # Spread over the replicas like n sessions would be.
                    f"{session}#{i}" if session else "",
                    merge.send_for(i),
                    clocks[i],
                    profile=profile,
                    request=one,
                )
                for i in range(n)
            ]
        )
        # They ran side by side: the engine's time is the longest of theirs.
        clock.upstream_s += max(c.upstream_s for c in clocks)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            if not merge.started:
                raise failed[0]
            log.warning("a choice of a merged stream failed mid-answer: %r", failed[0])
        outcomes = [r for r in results if isinstance(r, Outcome)]
        merged = Outcome(
            target=outcomes[0].target if outcomes else None,
            status=200,
            prompt_tokens=sum(o.prompt_tokens for o in outcomes),
            cached_tokens=sum(o.cached_tokens for o in outcomes),
            completion_tokens=sum(o.completion_tokens for o in outcomes),
            ttft_s=min((o.ttft_s for o in outcomes if o.ttft_s is not None), default=None),
        )
        usage = {
            "prompt_tokens": merged.prompt_tokens,
            "completion_tokens": merged.completion_tokens,
            "total_tokens": merged.total_tokens,
        }
        await merge.finish(usage, clock.header)
        return merged

    async def _try(
        self,
        target: Target,
        bodies: _Bodies,
        send,
        clock: Clock,
        anthropic_request: dict | None,
        model: str,
        *,
        last: bool,
    ) -> Outcome | str:
        """The target's answer relayed (its Outcome), or why it was passed over.

        Raises ApiError for an engine's refusal, and for the last target's failure.
        """
        router = self._router
        started = clock.upstream_begin()
        try:
            if target.external:
                resp = await self._http.post(
                    target.base_url + bodies.path,
                    data=bodies.for_target(target),
                    headers=_external_headers(target),
                )
            else:
                resp = await self._local.post(
                    target.base_url,
                    bodies.path,
                    bodies.for_target(target),
                    authorization=target.authorization,
                    peer_name=target.peer_name,
                )
        except _NET_ERRORS as e:
            clock.upstream_end(started)
            router.failed(target)
            log.warning("%s failed before answering (%r); trying the next", target.replica_id, e)
            return f"{target.replica_id}: {e.__class__.__name__}"
        clock.upstream_end(started)
        outcome = Outcome(target=target, status=resp.status)
        async with resp:
            if not self._judge(target, resp) and not last:
                return f"{target.replica_id}: {resp.status}"
            if resp.status != 200:
                await self._refused(target, resp, model, clock)
            if resp.headers.get("content-type", "").startswith("text/event-stream"):
                return await self._stream(
                    target, resp, bodies, send, clock, outcome, started, anthropic_request, model
                )
            t = clock.upstream_begin()
            try:
                data = await resp.read()
            except _NET_ERRORS as e:
                clock.upstream_end(t)
                router.failed(target)
                log.warning("%s cut its answer short (%r); trying the next", target.replica_id, e)
                return f"{target.replica_id}: {e.__class__.__name__}"
            clock.upstream_end(t)
            outcome.ttft_s = t - started
            answer = _usage_from(outcome, data)
            if answer is None:
                router.failed(target)
                raise ApiError(
                    502,
                    f"the engine serving {model!r} answered with something other than JSON",
                    code="upstream_error",
                )
            if anthropic_request is not None:
                await messages.relay_whole(
                    resp.status, data, anthropic_request, send, clock.header, outcome
                )
                return outcome
            data = conform.whole_bytes(bodies.path, answer, data, model)
            ctype = resp.headers.get("content-type", "application/json")
            await send(
                {
                    "type": "http.response.start",
                    "status": resp.status,
                    "headers": [
                        (b"content-type", ctype.encode()),
                        (b"content-length", str(len(data)).encode()),
                        clock.header(),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": data})
            return outcome

    async def _refused(self, target: Target, resp: Response, model: str, clock: Clock) -> None:
        """Raise the error the client gets for an engine's answer other than 200."""
        t = clock.upstream_begin()
        try:
            data = await resp.read()
        except _NET_ERRORS:
            data = b""
        clock.upstream_end(t)
        raise engine_error(
            resp.status,
            data,
            model=model,
            retry_after_s=_retry_after(resp),
            who="the outside provider" if target.external else "the engine",
        )

    def _make(self, target: Target, path: str, model: str) -> Make:
        key = (target.replica_id, path, model)
        make = self._makes.get(key)
        if make is None:
            if len(self._makes) >= MAKES_MAX:
                self._makes.clear()
            make = self._makes[key] = Make()
        return make

    def _judge(self, target: Target, resp: Response) -> bool:
        """Tell the target's breaker how it answered; False if it failed (pass it over)."""
        status = resp.status
        # An outside provider refusing its key, or a replica's door refusing the
        # replica's (a rotation not seen here yet): passed over, never relayed.
        refused = status == 401
        if status < 500 and status != 429 and not refused:
            self._router.succeeded(target)
            return True
        wait = self._router.failed(target, status, retry_after_s=_retry_after(resp))
        if status == 401 and target.external:
            # Named by its endpoint and URL; the key itself is never written anywhere.
            log.warning(
                "external_key_refused: %s (%s) refused its key (401); passed over for %.0f s",
                target.replica_id,
                target.base_url,
                wait,
            )
        else:
            log.warning(
                "%s answered %s%s",
                target.replica_id,
                status,
                f"; passed over for {wait:.0f} s" if wait else "",
            )
        return False

    async def _stream(
        self,
        target: Target,
        resp: Response,
        bodies: _Bodies,
        send,
        clock: Clock,
        outcome: Outcome,
        started: float,
        anthropic_request: dict | None,
        model: str,
    ) -> Outcome | str:
        pieces = (
            resp.content.iter_any() if isinstance(resp, aiohttp.ClientResponse) else aiter(resp)
        )
        try:
            # Read before anything is sent: a stream that fails now can still go elsewhere.
            first = await anext(pieces, b"")
        except _NET_ERRORS as e:
            self._router.failed(target)
            log.warning("%s cut its stream at once (%r); trying the next", target.replica_id, e)
            return f"{target.replica_id}: {e.__class__.__name__}"
        stream = self._counted(target, first, pieces)
        if anthropic_request is not None and resp.status == 200:
            await messages.relay_stream(
                stream, anthropic_request, send, clock.header, outcome, started
            )
        else:
            await send(
                {
                    "type": "http.response.start",
                    "status": resp.status,
                    "headers": [
                        (b"content-type", resp.headers["content-type"].encode()),
                        (b"cache-control", b"no-cache"),
                        clock.header(),
                    ],
                }
            )
            tap = UsageTap(
                outcome,
                drop_usage=bodies.drop_usage,
                sent_at=started,
                fix=conform.CHUNK.get(bodies.path),
                model=model,
                make=self._make(target, bodies.path, model),
            )
            async for piece in stream:
                out = tap.feed(piece)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            await send({"type": "http.response.body", "body": tap.flush()})
        if outcome.ttft_s is not None:
            self._router.observe_ttft(target, outcome.ttft_s)
        return outcome

    async def _counted(
        self, target: Target, first: bytes, rest: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """The stream's pieces; a target that breaks off mid-stream is counted as failed."""
        if first:
            yield first
        while True:
            try:
                piece = await anext(rest, None)
            except _NET_ERRORS as e:
                self._router.failed(target)
                log.warning(
                    "%s broke off a stream already relayed in part: %s", target.replica_id, e
                )
                raise BrokeOff(f"the engine serving this model broke off its answer ({e})") from e
            if piece is None:
                return
            yield piece


def _usage_from(outcome: Outcome, data: bytes) -> dict | None:
    """The whole answer parsed (None if it is not a JSON object), its usage into ``outcome``."""
    try:
        answer = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(answer, dict):
        return None
    usage_into(outcome, answer.get("usage"))
    return answer


def _retry_after(resp: Response) -> float | None:
    value = resp.headers.get("retry-after", "")
    try:
        return float(value) if value else None
    except ValueError:
        return None  # an HTTP date: the breaker's own backoff will do
