"""The gateway's own MCP client against company servers written with the official SDK."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from gatewayd.mcp.upstream import Upstream, UpstreamError, UpstreamRpcError
from tests.fakes.mcp_servers import ServerProcess, change_tools, hr_server, serve

pytestmark = pytest.mark.timeout(60)

TOKEN = {"Authorization": "Bearer s3cret"}


@contextlib.asynccontextmanager
async def upstream(url: str, headers=TOKEN, *, timeout_s: float = 10.0, on_notification=None):
    async with aiohttp.ClientSession() as http:
        up = Upstream(
            "hr",
            url,
            "streamable_http",
            headers,
            timeout_s,
            http=http,
            on_notification=on_notification,
        )
        await up.open()
        try:
            yield up
        finally:
            await up.close()


def lookup(name: str) -> dict:
    return {"name": "lookup", "arguments": {"name": name}}


async def test_a_2026_server_is_called_statelessly_with_the_routing_headers_the_spec_asks_for():
    hr = hr_server("s3cret")
    async with serve(hr) as url, upstream(url) as up:
        assert up.protocol_version == "2026-07-28"
        assert up.session_id is None
        result = await up.request("tools/call", lookup("Ann"))
    assert result["structuredContent"] == {
        "name": "Ann",
        "email": "ann@example.com",
        "team": "people",
    }
    call = next(r for r in hr.requests if r.headers.get("mcp-method") == "tools/call")
    assert call.headers["mcp-protocol-version"] == "2026-07-28"
    assert call.headers["mcp-name"] == "lookup"
    assert "mcp-session-id" not in call.headers
    assert [r.headers.get("mcp-method") for r in hr.requests] == ["server/discover", "tools/call"]


async def test_a_server_from_before_2026_is_called_through_the_initialize_handshake():
    hr = hr_server("s3cret", legacy_only=True)
    async with serve(hr) as url:
        async with upstream(url, on_notification=lambda m, p: None) as up:
            assert up.protocol_version == "2025-11-25"
            assert up.session_id
            assert [t["name"] for t in await up.list_tools()] == ["lookup", "slow"]
            await up.request("tools/call", lookup("Ann"))
        seen = [(r.method, r.headers.get("mcp-session-id")) for r in hr.requests]
    # discover refused; initialize; then every request carries the session, and close DELETEs it.
    assert seen[0] == ("POST", None) and seen[1] == ("POST", None)
    assert {sid for _, sid in seen[2:]} == {up.session_id}
    assert {m for m, _ in seen[2:]} == {"POST", "GET", "DELETE"}
    assert seen[-1][0] == "DELETE"
    assert hr.requests[3].headers["mcp-protocol-version"] == "2025-11-25"


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "legacy"])
async def test_progress_sent_before_the_answer_reaches_the_listener_of_that_call(legacy):
    progress = []
    hr = hr_server("s3cret", legacy_only=legacy)
    args = {"name": "slow", "arguments": {"seconds": 0.0}, "_meta": {"progressToken": "t1"}}
    async with serve(hr) as url, upstream(url) as up:
        result = await up.request(
            "tools/call", args, on_notification=lambda m, p: progress.append((m, p["progress"]))
        )
    assert result["content"][0]["text"] == "slept 0.0 s"
    assert progress == [("notifications/progress", 0), ("notifications/progress", 1)]


@pytest.mark.parametrize("legacy", [False, True], ids=["subscriptions/listen", "GET stream"])
async def test_a_changed_tool_list_reaches_on_notification(legacy):
    changed = asyncio.Event()

    def on_notification(method, params):
        if method == "notifications/tools/list_changed":
            changed.set()

    hr = hr_server("s3cret", legacy_only=legacy)
    async with serve(hr) as url, upstream(url, on_notification=on_notification) as up:
        await up.notifications_ready.wait()
        await change_tools(hr)
        await changed.wait()
        assert "vacation" in [t["name"] for t in await up.list_tools()]


async def test_a_refused_credential_is_an_http_error_saying_so():
    async with serve(hr_server("s3cret")) as url:
        with pytest.raises(UpstreamError) as caught:
            async with upstream(url, {"Authorization": "Bearer wrong"}):
                pass
    assert caught.value.kind == "http"
    assert str(caught.value) == "the server answered 401: its credential was refused"


async def test_a_tool_that_does_not_answer_in_time_is_a_timeout_naming_the_seconds():
    async with serve(hr_server("s3cret")) as url, upstream(url) as up:
        with pytest.raises(UpstreamError) as caught:
            await up.request(
                "tools/call", {"name": "slow", "arguments": {"seconds": 30}}, timeout_s=0.2
            )
        assert (caught.value.kind, str(caught.value)) == ("timeout", "no answer within 0.2 s")
        # The connection is still good for the next call.
        assert (await up.request("tools/call", lookup("Bo")))["structuredContent"]["name"] == "Bo"


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "legacy"])
async def test_a_call_given_up_on_stops_the_tool_on_the_server(legacy):
    # A session's server keeps running a tool nobody waits for unless told (notifications/cancelled).
    hr = hr_server("s3cret", legacy_only=legacy)
    async with serve(hr) as url, upstream(url) as up:
        with pytest.raises(UpstreamError):
            await up.request(
                "tools/call", {"name": "slow", "arguments": {"seconds": 60}}, timeout_s=0.3
            )
        await hr.slow_cancelled.wait()


async def test_nothing_listening_is_a_connect_error_naming_the_address():
    with socket_free_port() as port:
        url = f"http://127.0.0.1:{port}/mcp"
        with pytest.raises(UpstreamError) as caught:
            async with upstream(url):
                pass
    assert (caught.value.kind, str(caught.value)) == ("connect", f"connection refused at {url}")


async def test_an_address_that_is_no_mcp_server_says_so():
    async def web_page(scope, receive, send):
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/html")],
            }
        )
        await send({"type": "http.response.body", "body": b"<html>intranet</html>"})

    async with serve(web_page, path="/") as url:
        with pytest.raises(UpstreamError) as caught:
            async with upstream(url):
                pass
    assert caught.value.kind == "protocol"
    assert str(caught.value).startswith(
        "not an MCP server: its answer to initialize is not JSON-RPC"
    )


async def test_a_json_rpc_error_of_the_server_is_relayed_as_it_came():
    async with serve(hr_server("s3cret")) as url, upstream(url) as up:
        with pytest.raises(UpstreamRpcError) as caught:
            await up.request("no/such/method")
    assert caught.value.code == -32601


async def test_a_server_killed_mid_session_fails_the_call_in_flight_then_answers_once_restarted():
    # The breaker's acceptance: killed → transport errors, restarted → the same Upstream works again.
    started = asyncio.Event()
    async with ServerProcess("hr", token="s3cret") as proc, upstream(proc.url) as up:
        slow = {"name": "slow", "arguments": {"seconds": 30}, "_meta": {"progressToken": 1}}
        call = asyncio.create_task(
            up.request("tools/call", slow, on_notification=lambda m, p: started.set())
        )
        await started.wait()  # the server is inside the tool
        proc.kill()
        with pytest.raises(UpstreamError) as in_flight:
            await call
        assert in_flight.value.kind == "closed"
        await proc.wait()
        with pytest.raises(UpstreamError) as after:
            await up.request("tools/call", lookup("Ann"))
        assert (after.value.kind, str(after.value)) == (
            "connect",
            f"connection refused at {proc.url}",
        )
        await proc.start()
        assert (await up.request("tools/call", lookup("Ann")))["structuredContent"]["name"] == "Ann"


async def test_a_legacy_session_the_restarted_server_forgot_is_started_again_once():
    # Regression guard: a server restart must not leave every later call failing with 404.
    async with (
        ServerProcess("hr", token="s3cret", legacy_only=True) as proc,
        upstream(proc.url) as up,
    ):
        first = up.session_id
        await proc.stop()
        await proc.start()
        calls = [up.request("tools/call", lookup(n)) for n in ("Ann", "Bo", "Cy")]
        results = await asyncio.gather(*calls)
        assert [r["structuredContent"]["name"] for r in results] == ["Ann", "Bo", "Cy"]
        assert up.session_id not in (None, first)
        initializes = [
            r
            for r in await proc.seen()
            if "mcp-session-id" not in r["headers"] and r["method"] == "POST"
        ]
    assert len(initializes) == 1  # one new session for the three calls that met the 404


@contextlib.contextmanager
def socket_free_port():
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    yield port


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "legacy"])
async def test_calls_reuse_one_http_connection_even_when_answers_come_as_event_streams(legacy):
    # Regression: answer streams left unread after the answer made aiohttp close their
    # connection — 147 new connections in 200 legacy calls, p50 7.8 ms instead of 1.7.
    made = []
    trace = aiohttp.TraceConfig()

    async def on_connection(session, ctx, params):
        made.append(1)

    trace.on_connection_create_end.append(on_connection)
    hr = hr_server("s3cret", legacy_only=legacy)
    async with serve(hr) as url, aiohttp.ClientSession(trace_configs=[trace]) as http:
        up = Upstream("hr", url, "streamable_http", TOKEN, 10.0, http=http)
        await up.open()
        opened = len(made)
        for n in range(20):
            await up.request("tools/call", lookup(f"p{n}"))
        await up.close()
    assert len(made) == opened
