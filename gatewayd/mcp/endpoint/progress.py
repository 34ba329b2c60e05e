"""Progress of a long tools/call, relayed to its caller as the call's SSE answer.

A caller that puts ``params._meta.progressToken`` on a tools/call and accepts
``text/event-stream`` hears the tool's progress as it happens. The upstream is
sent a token of the gateway's own in its place, never the caller's: callers
pick tokens freely (the SDK client uses its request id), two callers of one key
share one upstream connection, and on an HTTP+SSE server every call's progress
comes down one stream, so the caller's tokens would meet there. Only
``notifications/progress`` carrying that call's upstream token go into the
call's stream, with the caller's own token put back.

As the SDK server does, the answer commits to SSE only when the first progress
arrives (or after SSE_PING_S of silence, so a proxy does not cut the wait): a
call that ends before either is answered as JSON with its usual status. Once
streaming, the result (or the error) is the last frame. Calls without a token
never come here: their path is unchanged.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from gatewayd.mcp.endpoint import wire
from gatewayd.mcp.endpoint.errors import INTERNAL_ERROR, error_bytes, notification_bytes

log = logging.getLogger(__name__)

PROGRESS = "notifications/progress"
# Progress frames held for a caller that stopped reading; later ones are dropped
# (progress is a gauge: the next one says as much), the answer never is.
MAX_QUEUED = 256

Notify = Callable[[str, dict | None], None]

# Upstream tokens: unique in this process, so unique on every upstream connection.
_tokens = itertools.count(1)

_SSE_TYPES = ("text/event-stream", "text/*", "*/*")


def accepts_sse(accept: str) -> bool:
    """Whether an Accept header lets the answer be an event stream (q=0 refuses a type)."""
    for part in accept.split(","):
        media, _, params = part.partition(";")
        if media.strip().lower() not in _SSE_TYPES:
            continue
        refused = False
        for p in params.split(";"):
            name, _, value = p.partition("=")
            if name.strip().lower() == "q":
                try:
                    refused = float(value) <= 0
                except ValueError:
                    refused = False
        if not refused:
            return True
    return False


def caller_token(params: dict, headers: dict[str, str]):
    """The call's progress token when its progress can be relayed (the request's
    Accept takes an event stream), else None."""
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return None
    token = meta.get("progressToken")
    # bool is an int in Python, and JSON's true is no token.
    if not isinstance(token, str | int) or isinstance(token, bool):
        return None
    return token if accepts_sse(headers.get("accept", "")) else None


class Progress:
    """One call's progress relay: the token sent upstream, and the frames for the caller."""

    __slots__ = ("caller_token", "frames", "other", "token", "wake")

    def __init__(self, caller_token, other: Notify):
        self.caller_token = caller_token
        self.token = f"llmgw-progress-{next(_tokens)}"
        self.frames: deque[bytes] = deque()
        self.wake = asyncio.Event()
        # What the upstream's own listener does with anything else (list changes).
        self.other = other

    def on_notification(self, method: str, params: dict | None) -> None:
        if method != PROGRESS:
            self.other(method, params)
            return
        if not isinstance(params, dict) or params.get("progressToken") != self.token:
            return  # another call's, or nobody's: never into this caller's stream
        if len(self.frames) >= MAX_QUEUED:
            return
        relayed = {**params, "progressToken": self.caller_token}
        self.frames.append(wire.sse_frame(notification_bytes(PROGRESS, relayed)))
        self.wake.set()


async def _woken(event: asyncio.Event, timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def answer(send, progress: Progress, work: Awaitable[tuple[int, bytes]], req_id) -> None:
    """Answer a call whose progress is relayed: ``work`` gives (HTTP status, answer body)
    once the call has ended (its accounting done)."""
    task = asyncio.ensure_future(work)
    wake = progress.wake
    task.add_done_callback(lambda _: wake.set())
    frames = progress.frames
    try:
        await _woken(wake, wire.SSE_PING_S)
        if task.done() and not frames:
            status, body = task.result()  # it ended before any progress: as JSON
            await wire.send_bytes(send, status, body)
            return
        await send({"type": "http.response.start", "status": 200, "headers": wire.SSE_HEADERS})
        while True:
            wake.clear()
            while frames:
                await send(
                    {"type": "http.response.body", "body": frames.popleft(), "more_body": True}
                )
            if task.done():
                break
            if not await _woken(wake, wire.SSE_PING_S):
                await send(
                    {"type": "http.response.body", "body": wire.PING_FRAME, "more_body": True}
                )
        try:
            _, body = task.result()
        except Exception:
            log.exception("answering an /mcp tools/call failed")
            body = error_bytes(req_id, INTERNAL_ERROR, "the gateway failed on this request")
        await send({"type": "http.response.body", "body": wire.sse_frame(body), "more_body": False})
    finally:
        if not task.done():
            task.cancel()
