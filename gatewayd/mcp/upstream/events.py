"""Server-sent events as MCP servers send them: JSON-RPC messages in `data:` lines.

One reader serves all three places events come from: a POST answered as
text/event-stream (progress notifications, then the answer), the legacy
session's GET stream, and the HTTP+SSE transport's stream (whose first event,
`endpoint`, names where to POST).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp

from llmgw import __version__

CLIENT_INFO = {"name": "llmgw", "version": __version__}
# Our own asyncio.timeout bounds each exchange; aiohttp's default 5-minute total
# would cut the long-lived notification streams.
NO_AIOHTTP_TIMEOUT = aiohttp.ClientTimeout(total=None)
# A tool's answer arrives as one `data:` line; the gateway relays answers of
# up to its own request limit (mcp.max_body_bytes, 64 MiB) and some room.
MAX_EVENT_BYTES = 128 * 1024 * 1024


async def read_events(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, str]]:
    """Yield (event name, data) for each event of `resp`; the name is "message" when unnamed."""
    content = resp.content
    name = ""
    data: list[str] = []
    while True:
        try:
            raw = await content.readuntil(b"\n", max_size=MAX_EVENT_BYTES)
        except aiohttp.http_exceptions.LineTooLong as exc:
            raise ValueError(f"an event is over {MAX_EVENT_BYTES // (1024 * 1024)} MiB") from exc
        if not raw:
            return  # end of stream; a last event without its blank line is dropped, as the spec says
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield name or "message", "\n".join(data)
            name, data = "", []
        elif line.startswith("data:"):
            data.append(line[6:] if line.startswith("data: ") else line[5:])
        elif line.startswith("event:"):
            name = line[6:].strip()
        # "id:", "retry:" and ": comments" (keep-alive pings) need nothing from us.


def loads(data: str | bytes) -> dict | None:
    """A JSON-RPC message, or None where `data` is not a JSON object."""
    try:
        msg = json.loads(data)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def dumps(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()


def answer_to_server_request(msg: dict) -> dict:
    """What the gateway answers a request a server sends it (sampling, elicitation, roots …).

    Only ping is answered: the gateway has no model, user or roots of its own to
    offer, and a server left waiting would hold its tool call until the timeout.
    """
    if msg.get("method") == "ping":
        return {"jsonrpc": "2.0", "id": msg.get("id"), "result": {}}
    error = {
        "code": -32601,
        "message": f"the gateway answers no {msg.get('method')} requests from MCP servers",
    }
    return {"jsonrpc": "2.0", "id": msg.get("id"), "error": error}


def cancelled(request_id: object) -> dict:
    """notifications/cancelled's params for a request the gateway gave up on."""
    return {"requestId": request_id, "reason": "the gateway stopped waiting for the answer"}
