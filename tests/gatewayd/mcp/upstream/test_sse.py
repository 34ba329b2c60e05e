"""The HTTP+SSE transport against the SDK's own SSE server (the wiki)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from gatewayd.mcp.upstream import Upstream, UpstreamError
from tests.fakes.mcp_servers import ServerProcess, change_tools, hr_server, serve, wiki_server

pytestmark = pytest.mark.timeout(60)


def wiki(url: str, http: aiohttp.ClientSession, on_notification=None) -> Upstream:
    return Upstream("wiki", url, "sse", {}, 10.0, http=http, on_notification=on_notification)


async def test_an_sse_server_lists_and_calls_its_tools():
    async with serve(wiki_server()) as url, aiohttp.ClientSession() as http:
        up = wiki(url, http)
        await up.open()
        assert up.protocol_version == "2025-11-25"
        assert [t["name"] for t in await up.list_tools()] == ["search"]
        calls = [up.request("tools/call", {"name": "search", "arguments": {"q": q}}) for q in "abc"]
        results = await asyncio.gather(*calls)  # answers on one stream, each matched to its call
        await up.close()
    assert [r["content"][0]["text"] for r in results] == [f"{q} — how we work" for q in "abc"]
    assert up.closed


async def test_a_changed_tool_list_on_an_sse_server_reaches_on_notification():
    changed = asyncio.Event()
    srv = wiki_server()
    async with serve(srv) as url, aiohttp.ClientSession() as http:
        up = wiki(url, http, lambda m, p: m == "notifications/tools/list_changed" and changed.set())
        await up.open()
        await change_tools(srv)
        await changed.wait()
        assert "vacation" in [t["name"] for t in await up.list_tools()]
        await up.close()


async def test_an_sse_server_that_goes_away_closes_the_upstream_and_fails_its_calls():
    async with ServerProcess("wiki") as proc, aiohttp.ClientSession() as http:
        up = wiki(proc.url, http)
        await up.open()
        await proc.stop()
        with pytest.raises(UpstreamError) as caught:
            await up.request("tools/call", {"name": "search", "arguments": {"q": "x"}})
        assert caught.value.kind in ("closed", "connect")
        assert up.closed  # the pool opens a new one on the next get()
        await up.close()


async def test_a_streamable_http_address_given_as_sse_is_refused_in_plain_words():
    async with serve(hr_server(None)) as url, aiohttp.ClientSession() as http:
        with pytest.raises(UpstreamError) as caught:
            await wiki(url, http).open()
    assert caught.value.kind == "protocol"
    assert str(caught.value) == (
        f"not an SSE MCP server: GET {url} answered 400 application/json (Bad Request: Missing session ID)"
    )
