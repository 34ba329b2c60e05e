"""The company servers every MCP test uses answer the official SDK client as real ones do."""

import asyncio

import httpx2
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from tests.fakes.mcp_servers import ServerProcess, change_tools, hr_server, serve, wiki_server

pytestmark = pytest.mark.timeout(60)


def _client(url: str, mode: str, token: str | None = "s3cret") -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(
        streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers)), mode=mode
    )


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_hr_server_lists_and_calls_its_tools_for_the_sdk_client_in_both_generations(mode):
    hr = hr_server("s3cret")
    async with serve(hr) as url, _client(url, mode) as c:
        assert [t.name for t in (await c.list_tools()).tools] == ["lookup", "slow"]
        result = await c.call_tool("lookup", {"name": "Ann"})
    assert result.structured_content == {
        "name": "Ann",
        "email": "ann@example.com",
        "team": "people",
    }
    assert set(hr.headers_seen("authorization")) == {"Bearer s3cret"}


async def test_the_hr_server_refuses_a_request_without_its_token_with_401():
    hr = hr_server("s3cret")
    async with serve(hr) as url, httpx2.AsyncClient() as http:
        resp = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert resp.status_code == 401
    assert hr.requests[0].method == "POST"


async def test_the_wiki_server_answers_over_sse():
    async with serve(wiki_server()) as url, Client(sse_client(url)) as c:
        result = await c.call_tool("search", {"q": "leave"})
    assert result.content[0].text == "leave — how we work"


async def test_changed_tools_reach_a_legacy_session_as_a_list_changed_notification():
    changed = asyncio.Event()

    async def on_message(message):
        if (
            getattr(getattr(message, "root", message), "method", "")
            == "notifications/tools/list_changed"
        ):
            changed.set()

    hr = hr_server(None)
    async with serve(hr) as url:
        client = Client(streamable_http_client(url), mode="legacy", message_handler=on_message)
        async with client as c:
            await c.list_tools()
            await change_tools(hr)
            await changed.wait()
            assert "vacation" in [t.name for t in (await c.list_tools()).tools]
        await change_tools(hr, "another")  # the session has ended: nobody to tell, no error


async def test_a_server_process_killed_comes_back_on_the_same_port():
    async with ServerProcess("hr", token="s3cret") as proc:
        first = proc.url
        proc.kill()
        await proc.wait()
        assert await proc.start() == first
        async with _client(proc.url, "auto") as c:
            assert (await c.call_tool("lookup", {"name": "Bo"})).structured_content["name"] == "Bo"
        assert (await proc.seen())[-1]["headers"]["authorization"] == "Bearer s3cret"
