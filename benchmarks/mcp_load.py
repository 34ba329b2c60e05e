"""The MCP overhead benchmark's load: an instant SDK tool server and a lean MCP client.

``serve_tool_server`` runs the company server the benchmark calls: an SDK
``MCPServer`` with one tool, ``echo``, answering at once, under uvicorn.
``McpPath`` is the client: raw JSON-RPC over aiohttp, either generation,
its handshake (2025-11-25) or discovery (2026-07-28) done once, then one POST
per call — the SDK's own client spends ~4 ms a call, more than what is
measured. ``measure_step`` sends calls open loop (on a fixed schedule,
whatever the answers do) straight to the server and through a gateway,
interleaved half a period apart, and compares the two per percentile.

Used by ``benchmarks/mcp_overhead.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from dataclasses import dataclass, field

import aiohttp

from llmgw.cli.ctl.bench_load import cpu_s, percentile, settle

HOST = "127.0.0.1"
MODERN, LEGACY = "2026-07-28", "2025-11-25"
SERVER = "bench"
CLIENT_INFO = {"name": "llmgw-mcp-bench", "version": "1"}
# Past this at p99 the load generator itself could not keep the schedule.
MACHINE_LAG_MS = 20.0
# A breaker's open time (mcp.breaker_open_s, 30 s) and a margin.
LISTED_WAIT_S = 45.0


# ---- the company server: an SDK MCPServer with an instant tool ----------------------------


def serve_tool_server(port: int) -> None:
    """Run the SDK server on ``port`` (this script with --serve-tool-server); prints READY."""
    import uvicorn
    from mcp.server import MCPServer

    srv = MCPServer(SERVER, log_level="WARNING")

    @srv.tool()
    def echo(text: str) -> str:
        """Answer ``text`` at once."""
        return text

    config = uvicorn.Config(
        srv.streamable_http_app(),
        host=HOST,
        port=port,
        log_level="warning",
        access_log=False,
        # uvicorn's 5 s would close connections idle between steps, racing the next call.
        timeout_keep_alive=120,
    )
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task
                return
            await asyncio.sleep(0.02)
        print(f"READY http://{HOST}:{port}/mcp", flush=True)
        await task

    asyncio.run(main())


# ---- the lean client -------------------------------------------------------------------------


class CallFailed(Exception):
    """A call got no good answer; the message is the failure's kind, as counted."""


@dataclass
class McpPath:
    """One way to the tool: where, with which credential, at which generation; opened once."""

    name: str
    url: str
    headers: dict[str, str]
    generation: str
    pid: int | None = None
    tool: str = "echo"
    http: aiohttp.ClientSession | None = None
    session_id: str = ""
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def _headers(self, method: str, name: str = "") -> dict[str, str]:
        h = {
            **self.headers,
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        if self.generation == MODERN:
            h["mcp-protocol-version"] = MODERN
            h["mcp-method"] = method
            if name:
                h["mcp-name"] = name
        elif self.session_id:
            h["mcp-session-id"] = self.session_id
            h["mcp-protocol-version"] = LEGACY
        return h

    def _params(self, params: dict) -> dict:
        if self.generation == MODERN:
            params = {
                **params,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            }
        return params

    async def rpc(self, method: str, params: dict, *, name: str = "") -> dict:
        """One JSON-RPC request; its result. CallFailed says how it failed."""
        assert self.http is not None
        rid = next(self._ids)
        body = json.dumps(
            {"jsonrpc": "2.0", "id": rid, "method": method, "params": self._params(params)}
        )
        try:
            async with self.http.post(
                self.url, data=body, headers=self._headers(method, name)
            ) as resp:
                raw = await resp.read()
                if method == "initialize":
                    self.session_id = resp.headers.get("mcp-session-id", "")
                if resp.status != 200:
                    raise CallFailed(f"HTTP {resp.status}")
                answer = _answer(raw, resp.content_type, rid)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise CallFailed(e.__class__.__name__) from e
        if "error" in answer:
            raise CallFailed(f"JSON-RPC {answer['error'].get('code')}")
        return answer.get("result") or {}

    async def open(self, http: aiohttp.ClientSession) -> None:
        """The handshake (legacy) or the discovery (2026-07-28), then find the echo tool."""
        self.http = http
        if self.generation == MODERN:
            await self.rpc("server/discover", {})
        else:
            await self.rpc(
                "initialize",
                {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO},
            )
            note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
            async with http.post(
                self.url, data=note, headers=self._headers("notifications/initialized")
            ) as resp:
                await resp.read()
        # A gateway whose breaker opened in an overloaded step lists the server's tools
        # again once its trial call succeeds: wait for that rather than measure a refusal.
        deadline = time.monotonic() + LISTED_WAIT_S
        while True:
            tools = [t["name"] for t in (await self.rpc("tools/list", {})).get("tools", [])]
            # Each gateway names it its way: echo, bench.echo (llmgw), bench-echo (LiteLLM).
            found = [t for t in tools if t == "echo" or t.endswith((".echo", "-echo"))]
            if found:
                self.tool = found[0]
                return
            if time.monotonic() > deadline:
                raise CallFailed(f"no echo tool in {tools}")
            await asyncio.sleep(1.0)

    async def call(self, text: str) -> None:
        result = await self.rpc(
            "tools/call", {"name": self.tool, "arguments": {"text": text}}, name=self.tool
        )
        if result.get("isError"):
            raise CallFailed("tool error")
        if not result.get("content"):
            raise CallFailed("no content")

    async def close(self) -> None:
        if self.http is not None and self.session_id:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with self.http.delete(self.url, headers=self._headers("")) as resp:
                    await resp.read()


def _answer(raw: bytes, content_type: str, rid: int) -> dict:
    """The JSON-RPC answer to ``rid`` from a JSON body or an SSE stream of events."""
    try:
        if content_type == "text/event-stream":
            for line in raw.splitlines():
                if line.startswith(b"data:"):
                    msg = json.loads(line[5:])
                    if msg.get("id") == rid and ("result" in msg or "error" in msg):
                        return msg
            raise CallFailed("no answer in the stream")
        return json.loads(raw)
    except (ValueError, AttributeError) as e:
        raise CallFailed("not JSON-RPC") from e


# ---- the open-loop load ----------------------------------------------------------------------


@dataclass
class _Samples:
    latency_s: list[float] = field(default_factory=list)
    sent: int = 0
    failures: dict[str, int] = field(default_factory=dict)


async def _one(path: McpPath, into: _Samples | None) -> None:
    t0 = time.perf_counter()
    why = ""
    try:
        await path.call("hello")
    except CallFailed as e:
        why = str(e)
    if into is None:
        return
    into.sent += 1
    if why:
        into.failures[why] = into.failures.get(why, 0) + 1
    else:
        into.latency_s.append(time.perf_counter() - t0)


async def _schedule(
    direct: McpPath, through: McpPath, rate: int, seconds: float, samples, lags: list | None
) -> None:
    """``rate`` calls a second on each path for ``seconds``: one pair per period, the two half a
    period apart, which goes first alternating; answers are awaited only at the end."""
    period = 1.0 / rate
    n = max(1, round(rate * seconds))
    tasks = []
    start = time.perf_counter() + 0.01
    for i in range(n * 2):
        path = (direct, through)[(i + i // 2) % 2]
        due = start + (i // 2) * period + (i % 2) * period / 2
        delay = due - time.perf_counter()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        if lags is not None:
            lags.append(max(0.0, time.perf_counter() - due))
        into = None if samples is None else samples[path is through]
        tasks.append(asyncio.create_task(_one(path, into)))
    await asyncio.gather(*tasks)


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)


def _figures(s: _Samples) -> dict:
    return {
        "sent": s.sent,
        "failed": sum(s.failures.values()),
        "failures": s.failures,
        "p50_ms": _ms(percentile(s.latency_s, 50)),
        "p99_ms": _ms(percentile(s.latency_s, 99)),
        "max_ms": _ms(max(s.latency_s, default=None)),
    }


async def measure_step(
    direct: McpPath,
    through: McpPath,
    *,
    rate: int,
    each_s: float,
    warmup_s: float,
    server_pids: tuple[int, int],
) -> dict:
    """One generation at one rate through one gateway: a warm-up, then the measured window.

    ``server_pids``: the server called straight, and the one behind the gateway (two
    processes of the same server: one Python process cannot answer both paths at 500/s).
    """
    waited_s = await settle([through.pid, *server_pids])
    if warmup_s > 0:
        await _schedule(direct, through, rate, warmup_s, None, None)
    samples = (_Samples(), _Samples())
    lags: list[float] = []
    pids = (through.pid, *server_pids, os.getpid())
    before = [cpu_s(p) for p in pids]
    t0 = time.perf_counter()
    await _schedule(direct, through, rate, each_s, samples, lags)
    elapsed = time.perf_counter() - t0
    after = [cpu_s(p) for p in pids]
    a, b = _figures(samples[0]), _figures(samples[1])
    lag_p99_ms = _ms(percentile(lags, 99))

    def per_call_ms(i: int, calls: int) -> float | None:
        if before[i] is None or after[i] is None or not calls:
            return None
        return round((after[i] - before[i]) / calls * 1000, 3)

    def added(q: str) -> float | None:
        return None if a[q] is None or b[q] is None else round(b[q] - a[q], 3)

    return {
        "gateway": through.name,
        "generation": through.generation,
        "rate": rate,
        "window_s": each_s,
        "elapsed_s": round(elapsed, 2),
        "added_p50_ms": added("p50_ms"),
        "added_p99_ms": added("p99_ms"),
        "failed": a["failed"] + b["failed"],
        "gateway_cpu_ms_per_call": per_call_ms(0, b["sent"]),
        "direct_server_cpu_ms_per_call": per_call_ms(1, a["sent"]),
        "behind_server_cpu_ms_per_call": per_call_ms(2, b["sent"]),
        "load_cpu_ms_per_call": per_call_ms(3, a["sent"] + b["sent"]),
        "load_lag_p99_ms": lag_p99_ms,
        # Calls sent late, or failing straight to the server: the machine, not the
        # gateway, was the limit, and the added figures say little.
        "machine_limited": a["failed"] > 0 or (lag_p99_ms or 0.0) > MACHINE_LAG_MS,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "waited_s": waited_s,
        "direct": a,
        "through": b,
    }
