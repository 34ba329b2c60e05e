"""A fake OpenAI-compatible upstream on a free port, and an ASGI ``send`` that keeps what it got."""

from __future__ import annotations

import contextlib
import json

from aiohttp import web


class Upstream:
    """Answers /v1/chat/completions as an engine or a provider would, as the test sets it.

    ``keys``: key -> status it gets (200 answers); a missing key gets 401.
    ``seen``: (authorization, body) of every request.
    """

    def __init__(self, keys: dict[str, int] | None = None) -> None:
        self.keys = keys if keys is not None else {}
        self.seen: list[tuple[str, dict]] = []
        self.retry_after = ""
        self.url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        auth = request.headers.get("authorization", "")
        self.seen.append((auth, body))
        status = self.keys.get(auth.removeprefix("Bearer "), 401) if self.keys else 200
        if status != 200:
            headers = {"retry-after": self.retry_after} if self.retry_after else {}
            return web.json_response(
                {"error": {"message": f"status {status}", "type": "x"}},
                status=status,
                headers=headers,
            )
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        head = {"id": "c1", "model": body["model"], "created": 0}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": "hi there"}}
            return web.json_response(
                {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        include = (body.get("stream_options") or {}).get("include_usage")

        async def event(choices, **extra):
            chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            if include and "usage" not in extra:
                chunk["usage"] = None
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        await event([{"index": 0, "delta": {"role": "assistant", "content": ""}}])
        for word in ("hi", " there"):
            await event([{"index": 0, "delta": {"content": word}}])
        await event([{"index": 0, "delta": {}, "finish_reason": "stop"}])
        if include:
            await event([], usage=usage)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    @contextlib.asynccontextmanager
    async def running(self):
        app = web.Application()
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


class Sent:
    """An ASGI send that keeps the status and the body."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body = b""

    async def __call__(self, message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = dict(message["headers"])
        else:
            self.body += message.get("body", b"")

    def json(self):
        return json.loads(self.body)

    def events(self) -> list:
        out = []
        for frame in self.body.split(b"\n\n"):
            if frame.startswith(b"data: ") and frame != b"data: [DONE]":
                out.append(json.loads(frame[6:]))
        return out
