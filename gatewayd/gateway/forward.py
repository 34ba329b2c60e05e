"""Sending a request on to a replica and relaying its answer — retries included.

``Forwarder.forward`` tries the router's candidates in order. A replica that
fails before any byte reached the client is passed over for the next one;
once the answer has started, it is relayed to the end. What happened comes
back as an ``Outcome`` (who answered, the status, the tokens used, the time
to first token) for the caller's accounting.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import aiohttp

from gatewayd.gateway import messages
from gatewayd.gateway.errors import ApiError
from gatewayd.gateway.router import Router, Target

log = logging.getLogger(__name__)

# How long to wait for an engine to answer at all; a stream may then run long.
CONNECT_TIMEOUT_S = 5.0
RETRY_AFTER_NO_REPLICA_S = 10


@dataclass
class Outcome:
    """What one forwarded request came to."""

    target: Target | None = None
    status: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    # Seconds from sending to the first byte of the answer; None if none came.
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


class Forwarder:
    def __init__(self, router: Router, engine_key: str):
        self._router = router
        self._engine_key = engine_key
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            auto_decompress=False,
        )

    async def close(self) -> None:
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
        profile: str = "",
    ) -> Outcome:
        """Send the request to the first candidate that answers and relay its answer.

        Raises ApiError (503) when no replica is ready or none answered —
        always before anything was sent to the client.
        """
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
                outcome = Outcome(target=target, status=resp.status)
                async with resp:
                    if anthropic_request is not None:
                        await messages.relay(resp, anthropic_request, send, clock.header)
                    else:
                        await self._relay(resp, send, clock, outcome)
                return outcome
            finally:
                self._router.end(target)
        raise ApiError(
            503,
            f"no replica of {model!r} answered ({last_error})",
            code="no_replica_answered",
            retry_after_s=RETRY_AFTER_NO_REPLICA_S,
        )

    async def _relay(self, resp: aiohttp.ClientResponse, send, clock: Clock, outcome) -> None:
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
        _usage_into(outcome, data)
        headers += [(b"content-length", str(len(data)).encode()), clock.header()]
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


def _usage_into(outcome: Outcome, data: bytes) -> None:
    try:
        usage = json.loads(data).get("usage") or {}
        outcome.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        outcome.completion_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        outcome.cached_tokens = int(details.get("cached_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        pass
