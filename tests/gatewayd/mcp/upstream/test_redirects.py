"""A company server that answers with a redirect: followed only within its own origin.

The servers are the SDK's own (tests/fakes/mcp_servers.py) behind a redirect, the place
it points a recorder on another loopback port (tests/fakes/redirecting.py).
"""

from __future__ import annotations

import contextlib

import aiohttp
import pytest

from gatewayd.mcp.upstream import Upstream, UpstreamError
from tests.fakes.mcp_servers import hr_server, serve, wiki_server
from tests.fakes.redirecting import Recorder, Redirecting, always

pytestmark = pytest.mark.timeout(60)

SEALED = {"Authorization": "Bearer s3cret", "X-Hr-Key": "hr-api-key-4e1b"}


@contextlib.asynccontextmanager
async def upstream(url: str, transport: str = "streamable_http"):
    async with aiohttp.ClientSession() as http:
        up = Upstream("hr", url, transport, SEALED, 5.0, http=http)
        try:
            yield up
        finally:
            await up.close()


async def test_a_server_redirecting_to_another_origin_is_not_followed_and_is_named():
    # Guards: aiohttp followed a 307 to another host:port and dropped only Authorization,
    # so the sealed X-Hr-Key (and the request's body) reached whatever the server named.
    async with Recorder() as elsewhere:
        hr = hr_server("s3cret")
        hr.app = Redirecting(hr.app, f"{elsewhere.url}/mcp", when=always)
        async with serve(hr) as url, upstream(url) as up:
            with pytest.raises(UpstreamError) as failed:
                await up.open()
    assert not elsewhere.saw(SEALED["X-Hr-Key"]) and elsewhere.requests == []
    assert failed.value.kind == "http"
    assert f"redirecting to {elsewhere.url}/mcp" in failed.value.message
    assert "another origin" in failed.value.message and "llmgw ctl mcp change" in failed.value.hint


async def test_an_sse_server_redirecting_its_stream_to_another_origin_is_not_followed():
    # Guards: the SSE transport's GET followed the redirect with the sealed headers.
    async with Recorder() as elsewhere:
        wiki = wiki_server()
        wiki.app = Redirecting(wiki.app, f"{elsewhere.url}/sse", when=always)
        async with serve(wiki) as url, upstream(url, "sse") as up:
            with pytest.raises(UpstreamError) as failed:
                await up.open()
    assert not elsewhere.saw(SEALED["X-Hr-Key"]) and elsewhere.requests == []
    assert f"redirecting to {elsewhere.url}/sse" in failed.value.message


async def test_a_307_within_the_servers_own_origin_is_followed_with_the_request():
    # The SDK's server (Starlette) answers …/mcp/ with a 307 to …/mcp: same origin, where
    # the credentials already go; refusing it would break servers added with a slash.
    hr = hr_server("s3cret")
    async with serve(hr) as url, upstream(url + "/") as up:
        await up.open()
        result = await up.request("tools/call", {"name": "lookup", "arguments": {"name": "Ann"}})
    assert result["structuredContent"]["email"] == "ann@example.com"
    assert {r.path for r in hr.requests} == {"/mcp/", "/mcp"}


async def test_a_302_within_the_origin_is_refused_as_it_would_drop_the_request_body():
    hr = hr_server("s3cret")
    moved = hr.app.inner
    async with serve(hr) as url:
        hr.app.inner = Redirecting(moved, url, when=lambda s, _: s["path"] == "/old", status=302)
        async with upstream(url.replace("/mcp", "/old")) as up:
            with pytest.raises(
                UpstreamError, match="answered 302, redirecting to .*only 307 and 308"
            ):
                await up.open()
