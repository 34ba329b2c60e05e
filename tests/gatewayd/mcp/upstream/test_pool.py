"""The pool of upstream connections: one per (owner, server), opened once, never shared."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gatewayd.mcp.upstream import UpstreamError, UpstreamPool
from gatewayd.store.mcp_records import McpServerRecord
from tests.fakes.mcp_servers import ServerProcess, hr_server, serve

pytestmark = pytest.mark.timeout(60)

CALLER_A = {"X-Llmgw-Key-Id": "key_a", "X-Llmgw-Project": "acme/people/hiring"}
CALLER_B = {"X-Llmgw-Key-Id": "key_b", "X-Llmgw-Project": "acme/people/payroll"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def pool_for(url: str, *, token: str = "s3cret", clock=None, idle_s: float = 300.0):
    hr = McpServerRecord(
        name="hr", url=url, transport="streamable_http", secret_refs={"Authorization": "mcp/hr/1"}
    )
    wiki = McpServerRecord(name="wiki", url=url, transport="sse")

    async def headers_for(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    pool = UpstreamPool(
        get_server={"hr": hr, "wiki": wiki}.get,
        headers_for=headers_for,
        timeout_for=lambda r: 10.0,
        idle_s=idle_s,
        **({"clock": clock} if clock else {}),
    )
    try:
        yield pool
    finally:
        await pool.close()


def lookup(name: str) -> dict:
    return {"name": "lookup", "arguments": {"name": name}}


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "legacy"])
async def test_the_pool_opens_one_connection_for_an_owner_and_reuses_it_for_50_calls(legacy):
    # LiteLLM opens an upstream session per operation (litellm#20242): we must not.
    hr = hr_server("s3cret", legacy_only=legacy)
    async with serve(hr) as url, pool_for(url) as pool:
        for n in range(50):
            up = await pool.get("key:key_a", "hr", caller=CALLER_A)
            await up.request("tools/call", lookup(f"p{n}"))
        assert pool.opened_total == 1
    discovers = [r for r in hr.requests if r.headers.get("mcp-method") == "server/discover"]
    assert len(discovers) == 1
    if legacy:
        sessions = {r.headers.get("mcp-session-id") for r in hr.requests if r.method == "POST"}
        assert len(sessions - {None}) == 1


async def test_two_owners_never_share_a_connection():
    # ContextForge shared one upstream session between clients (mcp-context-forge#4205).
    hr = hr_server("s3cret", legacy_only=True)
    async with serve(hr) as url, pool_for(url) as pool:
        a = await pool.get("sess-a", "hr", caller=CALLER_A)
        b = await pool.get("sess-b", "hr", caller=CALLER_B)
        await a.request("tools/call", lookup("Ann"))
        await b.request("tools/call", lookup("Bo"))
        assert a is not b and a.session_id != b.session_id
        assert pool.opened_total == 2
    by_session = {}
    for r in hr.requests:
        if "mcp-session-id" in r.headers:
            by_session.setdefault(r.headers["mcp-session-id"], set()).add(
                r.headers["x-llmgw-key-id"]
            )
    assert by_session == {a.session_id: {"key_a"}, b.session_id: {"key_b"}}


async def test_concurrent_gets_of_one_owner_share_one_open():
    async with serve(hr_server("s3cret")) as url, pool_for(url) as pool:
        ups = await asyncio.gather(
            *(pool.get("key:key_a", "hr", caller=CALLER_A) for _ in range(20))
        )
    assert len({id(u) for u in ups}) == 1
    assert pool.opened_total == 1


async def test_the_server_gets_its_own_credential_and_the_caller_headers_but_never_the_callers_key():
    hr = hr_server("s3cret")
    caller = {**CALLER_A, "Authorization": "Bearer llmgw-key-of-the-caller"}
    async with serve(hr) as url, pool_for(url) as pool:
        up = await pool.get("key:key_a", "hr", caller=caller)
        await up.request("tools/call", lookup("Ann"))
    assert set(hr.headers_seen("authorization")) == {"Bearer s3cret"}
    assert set(hr.headers_seen("x-llmgw-key-id")) == {"key_a"}
    assert set(hr.headers_seen("x-llmgw-project")) == {"acme/people/hiring"}


async def test_a_dropped_connection_is_opened_again_on_the_next_get():
    async with serve(hr_server("s3cret")) as url, pool_for(url) as pool:
        first = await pool.get("key:key_a", "hr", caller=CALLER_A)
        await pool.drop("key:key_a", "hr")
        assert first.closed
        second = await pool.get("key:key_a", "hr", caller=CALLER_A)
        assert second is not first and pool.opened_total == 2
        await second.request("tools/call", lookup("Ann"))


async def test_closing_an_owner_ends_its_legacy_sessions_with_a_delete_and_spares_the_others():
    hr = hr_server("s3cret", legacy_only=True)
    async with serve(hr) as url, pool_for(url) as pool:
        a = await pool.get("sess-a", "hr", caller=CALLER_A)
        b = await pool.get("sess-b", "hr", caller=CALLER_B)
        await pool.close_owner("sess-a")
        assert a.closed and not b.closed
        assert pool.owners("hr") == ["sess-b"]
        deletes = [r.headers["mcp-session-id"] for r in hr.requests if r.method == "DELETE"]
        assert deletes == [a.session_id]


async def test_connections_idle_past_idle_s_are_closed_but_one_with_a_call_in_flight_is_kept():
    clock = Clock()
    async with serve(hr_server("s3cret")) as url, pool_for(url, clock=clock, idle_s=60) as pool:
        idle = await pool.get("key:key_a", "hr", caller=CALLER_A)
        busy = await pool.get("key:key_b", "hr", caller=CALLER_B)
        started = asyncio.Event()
        slow = {"name": "slow", "arguments": {"seconds": 30}, "_meta": {"progressToken": 1}}
        call = asyncio.create_task(
            busy.request("tools/call", slow, on_notification=lambda m, p: started.set())
        )
        await started.wait()
        clock.now += 30
        assert await pool.close_idle() == 0
        clock.now += 31
        assert await pool.close_idle() == 1
        assert idle.closed and not busy.closed
        assert pool.owners("hr") == ["key:key_b"]
        call.cancel()


async def test_a_failed_open_is_not_kept_and_the_next_get_tries_again():
    async with serve(hr_server("s3cret")) as url, pool_for(url, token="wrong") as pool:
        for _ in range(2):
            with pytest.raises(UpstreamError) as caught:
                await pool.get("key:key_a", "hr", caller=CALLER_A)
            assert caught.value.kind == "http"
        assert pool.opened_total == 0 and pool.owners("hr") == []


async def test_an_unknown_server_is_refused_without_a_connection():
    async with pool_for("http://127.0.0.1:9/mcp") as pool:
        with pytest.raises(UpstreamError, match="no company MCP server of that name"):
            await pool.get("key:key_a", "payroll", caller=CALLER_A)


async def test_an_sse_connection_its_server_ended_is_opened_afresh_on_the_next_get():
    async with ServerProcess("wiki") as proc, pool_for(proc.url) as pool:
        first = await pool.get("key:key_a", "wiki", caller=CALLER_A)
        await proc.stop()
        await proc.start()
        with pytest.raises(UpstreamError):  # the new process knows nothing of that connection
            await first.request("tools/call", {"name": "search", "arguments": {"q": "x"}})
        assert first.closed
        second = await pool.get("key:key_a", "wiki", caller=CALLER_A)
        result = await second.request("tools/call", {"name": "search", "arguments": {"q": "x"}})
        assert result["content"][0]["text"] == "x — how we work"
        assert second is not first and pool.opened_total == 2
