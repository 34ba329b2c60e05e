"""The HTTP port: /health, /ready, /leader, the client API under /v1 and its OpenAPI document, /mcp.

/health: the process is up. /leader: 200 on the leader, 503 on a standby
(load balancers use it). /ready: 200 when this control plane can take
requests — it has read the cluster from the store and knows who leads —
whether or not a replica is ready: a cluster whose models are all on demand
and idle has none, and its first request is what starts one, so a load
balancer must still send it (docs/ha.md). Replica readiness is reported
apart, in /ready's body and as /ready/replicas (200 when some model can be
answered at once).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from gatewayd.gateway.protocol import openapi


def make_app(
    *,
    is_leader: Callable[[], bool],
    routable: Callable[[], tuple[bool, str]],
    serving: Callable[[], tuple[bool, str]] | None = None,
    gateway=None,
    mcp=None,
):
    """``mcp``: the MCP endpoint's ASGI app (gatewayd/mcp/endpoint), served at /mcp; None: off.

    ``serving``: whether this control plane takes requests, and why (None: always);
    ``routable``: whether a replica (or an outside provider) can answer at once.
    """

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/mcp" and mcp is not None:
            await mcp(scope, receive, send)
            return
        if path == "/v1/openapi.json":
            await _send(send, 200, openapi.document_bytes())
            return
        if gateway is not None and path.startswith("/v1/"):
            await gateway(scope, receive, send)
            return
        if path == "/health":
            status, body = 200, {"status": "ok"}
        elif path == "/leader":
            leader = is_leader()
            status, body = (200 if leader else 503), {"leader": leader}
        elif path == "/ready":
            ok, why = serving() if serving is not None else (True, "serving")
            answers, answers_why = routable()
            status = 200 if ok else 503
            body = {
                "ready": ok,
                "reason": why,
                "replicas": {"ready": answers, "reason": answers_why},
            }
        elif path == "/ready/replicas":
            ok, why = routable()
            status, body = (200 if ok else 503), {"ready": ok, "reason": why}
        else:
            status, body = 404, {"error": {"message": f"no route for {path}", "type": "not_found"}}
        await _send(send, status, json.dumps(body).encode())

    return app


async def _send(send, status: int, data: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
