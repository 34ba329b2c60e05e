"""/mcp relays a long tool call's progress: the SDK client's progress callback, both generations.

One gatewayd and three company servers for the module: "steps" (streamable HTTP,
2026-07-28 upstream), "stepsse" (the same tools over HTTP+SSE, where every call's
progress shares one stream) and "hrold" (hr answering as a pre-2026-07-28 server,
its slow tool reporting "started" and "done"). The steps tools:
report(steps) reports each step then answers; hold(label) reports, waits until the
test lets it go, reports again; quiet(label) only waits; fail() reports, then
answers a JSON-RPC error.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import httpx2
import pytest
import pytest_asyncio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError

from gatewayd.mcp.endpoint import wire
from tests.cluster_fixture import running_cluster
from tests.fakes.mcp_servers import CompanyServer, hr_server, serve
from tests.gatewayd.mcp.endpoint.kit import Gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")
MODES = ["auto", "legacy"]
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
FAILED = -32050  # fail()'s own JSON-RPC error code


class Steps:
    """An SDK server with tools that report progress, and the tools/call bodies it received."""

    def __init__(self, name: str, transport: str):
        mcp = MCPServer(name, log_level="WARNING")
        self.gates: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.calls: list[dict] = []  # tools/call params as they reached the server

        @mcp.tool()
        async def report(steps: int, ctx: Context, label: str = "step") -> str:
            """Report each of `steps` steps, then answer."""
            for i in range(1, steps + 1):
                await ctx.report_progress(i, steps, f"{label} {i}")
            return f"{label}: {steps} steps reported"

        @mcp.tool()
        async def hold(label: str, ctx: Context) -> str:
            """Report, wait until the test lets `label` go, report again."""
            await ctx.report_progress(1, 2, f"{label} waiting")
            await self.gates[label].wait()
            await ctx.report_progress(2, 2, f"{label} done")
            return label

        @mcp.tool()
        async def quiet(label: str) -> str:
            """Say nothing until the test lets `label` go."""
            await self.gates[label].wait()
            return label

        @mcp.tool()
        async def fail(ctx: Context) -> str:
            """Report, then answer a JSON-RPC error."""
            await ctx.report_progress(1, 2, "half way")
            raise MCPError(FAILED, "the report could not be finished")

        inner = mcp.sse_app() if transport == "sse" else mcp.streamable_http_app()
        path = "/sse" if transport == "sse" else "/mcp"
        self.srv = CompanyServer(mcp, path, transport, app=self._recording(inner))

    def _recording(self, inner):
        async def app(scope, receive, send):
            async def read():
                msg = await receive()
                if msg.get("type") == "http.request" and b'"tools/call"' in msg.get("body", b""):
                    self.calls.append(json.loads(msg["body"])["params"])
                return msg

            await inner(scope, read, send)

        return app


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(tmp_path_factory):
    steps, steps_sse = Steps("steps", "streamable_http"), Steps("stepsse", "sse")
    hr_old = hr_server(None, legacy_only=True)
    async with (
        serve(steps.srv) as url,
        serve(steps_sse.srv) as sse_url,
        serve(hr_old) as old_url,
        running_cluster(tmp_path_factory.mktemp("mcp")) as cluster,
    ):
        g = Gateway(cluster)
        g.steps, g.steps_sse = steps, steps_sse
        await g.add_server("steps", url)
        await g.add_server("stepsse", sse_url)
        await g.add_server("hrold", old_url)
        await g.key("p", "Acme/ml/progress")
        for server in ("steps", "stepsse", "hrold"):
            await g.grant("project:Acme/ml/progress", server)
        async with httpx2.AsyncClient(timeout=60) as http:
            g.http = http
            yield g


class Heard:
    """A progress callback that keeps what it was told, in order."""

    def __init__(self, on_first=None):
        self.seen: list[tuple[float, float | None, str | None]] = []
        self.on_first = on_first

    async def __call__(self, progress, total, message):
        self.seen.append((progress, total, message))
        if self.on_first is not None and len(self.seen) == 1:
            self.on_first()


def _text(result) -> str:
    return result.content[0].text


@pytest.mark.parametrize("mode", MODES)
async def test_each_progress_step_reaches_the_callback_in_order_then_the_result(gw, mode):
    heard = Heard()
    async with gw.client("p", mode) as c:
        r = await c.call_tool("steps.report", {"steps": 5}, progress_callback=heard)
    assert not r.is_error and _text(r) == "step: 5 steps reported"
    assert heard.seen == [(float(i), 5.0, f"step {i}") for i in range(1, 6)]


@pytest.mark.parametrize("mode", MODES)
async def test_progress_reaches_the_caller_while_the_tool_still_runs(gw, mode):
    # Guards: progress held back until the answer (a buffered relay) — the tool
    # waits for the caller to have heard its first step, so this would never end.
    label = f"live-{mode}"
    heard = Heard(on_first=gw.steps.gates[label].set)
    async with gw.client("p", mode) as c:
        r = await asyncio.wait_for(
            c.call_tool("steps.hold", {"label": label}, progress_callback=heard), 60
        )
    assert _text(r) == label
    assert heard.seen == [(1.0, 2.0, f"{label} waiting"), (2.0, 2.0, f"{label} done")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("stepsse.report", {"steps": 3}, [(float(i), 3.0, f"step {i}") for i in (1, 2, 3)]),
        ("hrold.slow", {"seconds": 0}, [(0.0, 1.0, "started"), (1.0, 1.0, "done")]),
    ],
    ids=["http-and-sse-server", "pre-2026-server"],
)
async def test_progress_of_a_server_over_sse_or_of_the_older_generation_is_relayed(
    gw, mode, tool, args, expected
):
    heard = Heard()
    async with gw.client("p", mode) as c:
        r = await c.call_tool(tool, args, progress_callback=heard)
    assert not r.is_error
    assert heard.seen == expected


@pytest.mark.parametrize("server", ["steps", "stepsse"])
async def test_two_callers_of_one_key_with_the_same_token_hear_only_their_own_progress(gw, server):
    # Guards: the caller's token sent upstream as is — both SDK clients use request id
    # as their token, share the key's upstream connection, and over HTTP+SSE every
    # call's progress comes down one stream: each would hear the other's.
    steps = gw.steps if server == "steps" else gw.steps_sse
    one, two = f"{server}-one", f"{server}-two"
    both_heard = asyncio.Event()
    heard = {}

    def first():
        if all(h.seen for h in heard.values()):
            both_heard.set()

    heard = {one: Heard(on_first=first), two: Heard(on_first=first)}

    async def call(c, label):
        return await c.call_tool(f"{server}.hold", {"label": label}, progress_callback=heard[label])

    before = len(steps.calls)
    async with gw.client("p") as a, gw.client("p") as b:
        calls = asyncio.gather(call(a, one), call(b, two))
        await asyncio.wait_for(both_heard.wait(), 60)  # both are in flight now
        steps.gates[one].set()
        steps.gates[two].set()
        ra, rb = await asyncio.wait_for(calls, 60)
    assert (_text(ra), _text(rb)) == (one, two)
    for label in (one, two):
        assert heard[label].seen == [(1.0, 2.0, f"{label} waiting"), (2.0, 2.0, f"{label} done")]
    # The server saw tokens of the gateway's own, one per call.
    tokens = [p["_meta"]["progressToken"] for p in steps.calls[before:]]
    assert len(tokens) == 2 and len(set(tokens)) == 2
    assert all(isinstance(t, str) and t.startswith("llmgw-progress-") for t in tokens)


@pytest.mark.parametrize("mode", MODES)
async def test_an_error_after_progress_is_the_last_frame_of_the_stream(gw, mode):
    heard = Heard()
    async with gw.client("p", mode) as c:
        with pytest.raises(MCPError) as failed:
            await c.call_tool("steps.fail", {}, progress_callback=heard)
    assert failed.value.code == FAILED
    assert failed.value.error.message == "the report could not be finished"
    assert heard.seen == [(1.0, 2.0, "half way")]


async def test_a_call_without_a_callback_never_sends_a_token_upstream(gw):
    before = len(gw.steps.calls)
    async with gw.client("p") as c:
        r = await c.call_tool("steps.report", {"steps": 2})
    assert _text(r) == "step: 2 steps reported"
    (params,) = gw.steps.calls[before:]
    assert "progressToken" not in params.get("_meta", {})


def _call(g, name: str, args: dict, *, token=None, accept: str) -> tuple[dict, bytes]:
    meta = META if token is None else {**META, "progressToken": token}
    headers = {
        "Authorization": f"Bearer {g.keys['p']}",
        "Content-Type": "application/json",
        "Accept": accept,
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": name,
    }
    params = {"name": name, "arguments": args, "_meta": meta}
    return headers, json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    ).encode()


def _frames(body: str) -> list[dict]:
    return [
        json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")
    ]


BOTH = "application/json, text/event-stream"


@pytest.mark.parametrize(
    ("token", "accept"),
    [(None, BOTH), ("mine", "application/json")],
    ids=["no-token", "json-only-accept"],
)
async def test_a_call_without_a_token_or_accepting_only_json_is_answered_as_json(gw, token, accept):
    headers, body = _call(gw, "steps.report", {"steps": 3}, token=token, accept=accept)
    r = await gw.http.post(gw.url, headers=headers, content=body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    answer = r.json()
    assert answer["id"] == 7 and answer["result"]["content"][0]["text"] == "step: 3 steps reported"


async def test_a_streamed_answer_carries_the_callers_own_token_and_ends_with_the_result(gw):
    headers, body = _call(gw, "steps.report", {"steps": 3}, token="mine", accept=BOTH)
    r = await gw.http.post(gw.url, headers=headers, content=body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    *progress, last = _frames(r.text)
    assert [
        (m["method"], m["params"]["progressToken"], m["params"]["progress"]) for m in progress
    ] == [("notifications/progress", "mine", i) for i in (1, 2, 3)]
    assert last["id"] == 7 and last["result"]["content"][0]["text"] == "step: 3 steps reported"


async def test_a_call_refused_before_any_progress_is_answered_as_json_with_its_status(gw):
    # The stream starts only with the first progress: a refusal keeps its HTTP status.
    headers, body = _call(gw, "nowhere.report", {}, token="mine", accept=BOTH)
    r = await gw.http.post(gw.url, headers=headers, content=body)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"] == {"code": -32602, "message": "Unknown tool: nowhere.report"}


async def test_a_streamed_call_leaves_one_row_and_metric_as_a_json_call_does(gw):
    await gw.key("acct", "Acme/ml/progress")
    async with gw.client("acct") as c:
        await c.call_tool("steps.report", {"steps": 2}, progress_callback=Heard())
        await c.call_tool("steps.report", {"steps": 2})
        with pytest.raises(MCPError):
            await c.call_tool("steps.fail", {}, progress_callback=Heard())
    await gw.rt.writer.flush()
    rows = await gw.server.store.list_mcp_calls(key_id=gw.key_ids["acct"])
    assert sorted((r.server, r.tool, r.status) for r in rows) == [
        ("steps", "fail", "error"),
        ("steps", "report", "ok"),
        ("steps", "report", "ok"),
    ]
    assert all(r.bytes_in > 0 and r.bytes_out > 0 and r.latency_ms > 0 for r in rows)
    plain, streamed = sorted((r for r in rows if r.tool == "report"), key=lambda r: r.bytes_in)
    # The answer's bytes are counted, not the progress frames around it.
    assert streamed.bytes_out == plain.bytes_out
    metrics = gw.server.metrics.registry
    failed = metrics.get_sample_value(
        "llmgw_mcp_calls_total", {"server": "steps", "tool": "fail", "status": "error"}
    )
    assert failed is not None and failed >= 1


async def test_a_call_silent_past_the_ping_interval_is_streamed_and_kept_open_by_pings(
    gw, monkeypatch
):
    # Guards: a proxy's idle-read timeout cutting a long call that reports nothing yet.
    monkeypatch.setattr(wire, "SSE_PING_S", 0.01)
    headers, body = _call(gw, "steps.quiet", {"label": "quiet"}, token="mine", accept=BOTH)
    async with gw.http.stream("POST", gw.url, headers=headers, content=body) as r:
        assert r.headers["content-type"] == "text/event-stream"
        lines = r.aiter_lines()
        async for line in lines:
            if line == ": ping":
                break
        gw.steps.gates["quiet"].set()  # only now may the tool answer
        rest = "\n".join([line async for line in lines])
    (last,) = _frames(rest)
    assert last["id"] == 7 and last["result"]["content"][0]["text"] == "quiet"
