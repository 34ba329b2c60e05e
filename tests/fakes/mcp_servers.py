"""Company MCP servers for tests, written with the official `mcp` SDK and served on 127.0.0.1.

Two servers stand for what an organisation runs behind the gateway:

    hr = hr_server("s3cret")      # MCPServer "hr", streamable HTTP at /mcp: tools lookup(name),
                                  # slow(seconds); 401 without "Authorization: Bearer s3cret"
    wiki = wiki_server()          # MCPServer "wiki", the older HTTP+SSE transport at /sse: search(q)

    async with serve(hr) as url:  # uvicorn in this process; url is the MCP address
        ...
        hr.requests               # every HTTP request that reached it: method, path, headers
        await change_tools(hr)    # a new tool, and notifications/tools/list_changed to every
                                  # connected session (legacy GET streams and subscriptions/listen)

The SDK's one streamable HTTP app answers both generations: 2026-07-28 (stateless, per request
`mcp-protocol-version`) and the session-based handshake (initialize, Mcp-Session-Id, GET stream).
`hr_server(token, legacy_only=True)` answers as servers written before 2026-07-28 do: a POST
carrying a version it does not know is refused with 400, so a client must fall back to initialize.

Where a test must kill a server for real (kill -9) and start it again on the same port, run it
as a process of its own:

    async with ServerProcess("hr", token="s3cret") as proc:   # python -m tests.fakes.mcp_servers
        proc.url; proc.kill(); await proc.start()              # the same port again
        await proc.seen()          # the requests it recorded (GET /_seen, no credential needed)
        await proc.change_tools()  # POST /_change_tools

The command line: `python -m tests.fakes.mcp_servers hr --port P --token T [--legacy-only]`
(or `wiki --port P`) prints `READY <url>` on stdout once it accepts requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import aiohttp
import anyio
import uvicorn
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.subscriptions import ToolsListChanged
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, KNOWN_PROTOCOL_VERSIONS

REPO_ROOT = Path(__file__).resolve().parents[2]

Asgi = Callable[
    [dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]
]


@dataclass
class SeenRequest:
    """One HTTP request as it reached a company server (header names in lower case)."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class CompanyServer:
    """An SDK MCPServer with the ASGI app serving it and what tests look at."""

    mcp: MCPServer
    path: str  # where the MCP endpoint is: "/mcp" (streamable HTTP) or "/sse"
    transport: str  # "streamable_http" | "sse"
    token: str | None = None
    legacy_only: bool = False
    requests: list[SeenRequest] = field(default_factory=list)
    # The handshake-era sessions that have spoken to it; change_tools() notifies each.
    sessions: list[Any] = field(default_factory=list)
    app: Asgi | None = None
    # Set when a call of hr's slow tool was cancelled before it answered.
    slow_cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    def headers_seen(self, name: str) -> list[str]:
        """Every value of header `name` that reached the server, in order."""
        return [r.headers[name.lower()] for r in self.requests if name.lower() in r.headers]


def hr_server(token: str | None = "s3cret", *, legacy_only: bool = False) -> CompanyServer:
    """The HR directory: streamable HTTP, a bearer token required (None: no credential needed)."""
    mcp = MCPServer("hr", log_level="WARNING")

    @mcp.tool()
    def lookup(name: str) -> dict[str, str]:
        """Find a person in the staff directory."""
        return {"name": name, "email": f"{name.lower()}@example.com", "team": "people"}

    @mcp.tool()
    async def slow(seconds: float, ctx: Context) -> str:
        """Answer after `seconds` (reports progress when asked to): stands for a tool that takes time."""
        await ctx.report_progress(0, 1, "started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            srv.slow_cancelled.set()  # the client gave up and told us (or cut the request)
            raise
        await ctx.report_progress(1, 1, "done")
        return f"slept {seconds} s"

    srv = CompanyServer(mcp, "/mcp", "streamable_http", token=token, legacy_only=legacy_only)
    _track_sessions(srv)
    srv.app = _Gate(srv, mcp.streamable_http_app())
    return srv


def wiki_server(token: str | None = None) -> CompanyServer:
    """The wiki: the HTTP+SSE transport (GET /sse, then POSTs to the address it names)."""
    mcp = MCPServer("wiki", log_level="WARNING")

    @mcp.tool()
    def search(q: str) -> list[str]:
        """Search the wiki's pages."""
        return [f"{q} — how we work", f"{q} — onboarding"]

    srv = CompanyServer(mcp, "/sse", "sse", token=token)
    _track_sessions(srv)
    srv.app = _Gate(srv, mcp.sse_app())
    return srv


async def change_tools(srv: CompanyServer, tool: str = "vacation") -> None:
    """Add tool `tool` and tell every connected session its tool list changed."""
    if tool not in {t.name for t in await srv.mcp.list_tools()}:

        def days_left(name: str) -> int:
            return 25

        srv.mcp.add_tool(days_left, name=tool, description="Days of leave a person has left.")
    # 2026-07-28 clients hear it through subscriptions/listen (the server's event bus)...
    await srv.mcp._subscriptions.publish(ToolsListChanged())
    # ... handshake-era ones on their session's GET stream (or the SSE stream).
    for session in list(srv.sessions):
        try:
            await session.send_tool_list_changed()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):  # it has ended since
            srv.sessions.remove(session)


def _track_sessions(srv: CompanyServer) -> None:
    async def remember(ctx, call_next):
        # ctx.session is made per request; the connection under it is the client's session.
        connection = ctx.session._connection
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS and all(
            s._connection is not connection for s in srv.sessions
        ):
            srv.sessions.append(ctx.session)
        return await call_next(ctx)

    srv.mcp.middleware.append(remember)


class _Gate:
    """ASGI in front of the SDK's app: records each request, checks the bearer token, and
    answers the two test routes (/_seen, /_change_tools) a server in another process needs."""

    def __init__(self, srv: CompanyServer, inner: Asgi) -> None:
        self.srv = srv
        self.inner = inner

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        path = scope["path"]
        if path == "/_seen":
            seen = [
                {"method": r.method, "path": r.path, "headers": r.headers}
                for r in self.srv.requests
            ]
            await _answer(send, 200, json.dumps(seen).encode())
            return
        if path == "/_change_tools":
            await change_tools(self.srv)
            await _answer(send, 200, b'{"ok":true}')
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        self.srv.requests.append(SeenRequest(scope["method"], path, headers))
        if (
            self.srv.token is not None
            and headers.get("authorization") != f"Bearer {self.srv.token}"
        ):
            body = (
                b'{"error":"invalid_token","error_description":"a valid bearer token is required"}'
            )
            await _answer(send, 401, body, [(b"www-authenticate", b'Bearer error="invalid_token"')])
            return
        version = headers.get("mcp-protocol-version")
        if (
            self.srv.legacy_only
            and scope["method"] == "POST"
            and version not in (None, *HANDSHAKE_PROTOCOL_VERSIONS)
        ):
            # What SDK 1.x servers answer a version they do not speak.
            supported = ", ".join(
                v for v in KNOWN_PROTOCOL_VERSIONS if v in HANDSHAKE_PROTOCOL_VERSIONS
            )
            error = {
                "code": -32600,
                "message": f"Bad Request: Unsupported protocol version: {version}. Supported: {supported}",
            }
            await _answer(
                send,
                400,
                json.dumps({"jsonrpc": "2.0", "id": "server-error", "error": error}).encode(),
            )
            return
        await self.inner(scope, receive, send)


async def _answer(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] = ()) -> None:
    head = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class _Uvicorn(uvicorn.Server):
    """uvicorn that says when it accepts requests, and leaves the test's signal handlers alone."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self):
        yield

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            self.ready.set()


def _listen(port: int) -> socket.socket:
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it every answer written in two parts waited 40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # A server killed with -9 leaves its port in TIME_WAIT; its restart must get it back.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serve(srv: CompanyServer | Asgi, port: int = 0, path: str = "/") -> AsyncIterator[str]:
    """Serve `srv` under uvicorn in this process; yields its MCP address once it accepts requests.

    A plain ASGI app is served too (something at an address that is no MCP server), at `path`.
    """
    if not isinstance(srv, CompanyServer):
        srv = CompanyServer(
            MCPServer("not-mcp", log_level="WARNING"), path, "streamable_http", app=srv
        )
    sock = _listen(port)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        srv.app, lifespan="on", log_level="warning", ws="none", timeout_graceful_shutdown=1
    )
    server = _Uvicorn(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    ready = asyncio.create_task(server.ready.wait())
    try:
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            raise RuntimeError(
                f"the {srv.mcp.name} MCP server did not start: {task.exception() or 'it exited'}"
            )
        yield f"http://127.0.0.1:{port}{srv.path}"
    finally:
        ready.cancel()
        server.should_exit = True
        # Open SSE and GET streams never end by themselves: after the grace, uvicorn cuts them.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await task
        sock.close()


class ServerProcess:
    """A company server in a process of its own, which a test can kill -9 and start again."""

    def __init__(
        self, kind: str, *, token: str | None = None, port: int = 0, legacy_only: bool = False
    ) -> None:
        self.kind = kind
        self.token = token
        self.port = port
        self.legacy_only = legacy_only
        self.url = ""
        self._proc: asyncio.subprocess.Process | None = None
        # Kept for the whole life of the object: a failed start shows what the server printed.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115

    async def start(self) -> str:
        """Start it (on the port it had before, if any); returns its MCP address once it accepts."""
        args = [
            sys.executable,
            "-m",
            "tests.fakes.mcp_servers",
            self.kind,
            "--port",
            str(self.port),
        ]
        if self.token is not None:
            args += ["--token", self.token]
        if self.legacy_only:
            args.append("--legacy-only")
        self._stderr.seek(0)
        self._stderr.truncate()
        self._proc = await asyncio.create_subprocess_exec(
            *args,
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
            env={**os.environ},
        )
        line = (await self._proc.stdout.readline()).decode().strip()
        if not line.startswith("READY "):
            await self._proc.wait()
            self._stderr.seek(0)
            raise RuntimeError(
                f"the {self.kind} MCP server did not start: {self._stderr.read().decode()[-2000:]}"
            )
        self.url = line.split(" ", 1)[1]
        self.port = int(self.url.split(":")[2].split("/")[0])
        return self.url

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """kill -9: no goodbye to anyone connected (await wait() to be sure it has gone)."""
        if self._proc is not None and self._proc.returncode is None:
            self._proc.send_signal(signal.SIGKILL)

    async def wait(self) -> None:
        if self._proc is not None:
            await self._proc.wait()

    async def stop(self) -> None:
        self.kill()
        await self.wait()

    async def seen(self) -> list[dict]:
        async with aiohttp.ClientSession() as http, http.get(f"{self.base}/_seen") as resp:
            return await resp.json()

    async def change_tools(self) -> None:
        async with aiohttp.ClientSession() as http, http.post(f"{self.base}/_change_tools") as resp:
            resp.raise_for_status()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()
        self._stderr.close()


async def _main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.mcp_servers")
    parser.add_argument("kind", choices=["hr", "wiki"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None)
    parser.add_argument("--legacy-only", action="store_true")
    args = parser.parse_args(argv)
    if args.kind == "hr":
        srv = hr_server(args.token, legacy_only=args.legacy_only)
    else:
        srv = wiki_server(args.token)
    async with serve(srv, args.port) as url:
        print(f"READY {url}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(sys.argv[1:]))
