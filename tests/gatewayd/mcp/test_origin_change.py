"""``llmgw ctl mcp change NAME --url`` to another origin: the sealed credentials stay behind.

A real gatewayd, ``llmgw ctl`` in a process of its own as an operator runs it, company
servers of the SDK's own on loopback ports (two ports: two origins), and the official SDK
client calling through ``/mcp`` to see what reaches the server afterwards.
"""

from __future__ import annotations

import json

import pytest

from tests.cluster_fixture import running_cluster
from tests.fakes.mcp_servers import hr_server, serve
from tests.gatewayd.mcp.endpoint.kit import Gateway

pytestmark = pytest.mark.timeout(120)

TOKEN, API_KEY = "hr-token-2b7e11", "hr-api-key-c39d04"
PROJECT = "Acme/ml/search"


@pytest.fixture
def files(tmp_path):
    token, key = tmp_path / "hr.token", tmp_path / "hr.key"
    token.write_text(TOKEN + "\n")
    key.write_text(API_KEY + "\n")
    return ["--bearer-file", str(token), "--header-file", f"X-Hr-Key={key}"]


async def ctl(cluster, *args: str) -> str:
    code, out, err = await cluster.ctl("mcp", *args)
    assert code == 0, err
    return out


async def granted(cluster) -> Gateway:
    g = Gateway(cluster)
    await g.key("a", PROJECT)
    await g.grant(f"project:{PROJECT}", "hr")
    return g


async def test_a_move_to_another_origin_drops_the_credentials_and_says_so(tmp_path, files):
    # Guards: ctl mcp change --url kept the sealed credentials, and the next call took the
    # old server's token and API key to whatever host the new address named.
    old, new = hr_server(None), hr_server(None)  # no credential needed: the new one answers
    async with (
        serve(old) as old_url,
        serve(new) as new_url,
        running_cluster(tmp_path) as cluster,
    ):
        await ctl(cluster, "add", "hr", "--url", old_url, *files)
        moved = json.loads(await ctl(cluster, "change", "hr", "--url", new_url, "--json"))

        g = await granted(cluster)
        async with g.client("a") as c:
            assert not (await c.call_tool("hr.lookup", {"name": "Ada"})).is_error
        assert new.requests
        for seen in new.requests:
            assert "authorization" not in seen.headers and "x-hr-key" not in seen.headers
            assert TOKEN not in seen.headers.values() and API_KEY not in seen.headers.values()
        assert moved.get("sealed_headers_dropped") == ["Authorization", "X-Hr-Key"]
        assert moved["sealed_header_names"] == [] and moved["url"] == new_url

        # Given again, they are the new address's; moved back, a person is told in words.
        await ctl(cluster, "change", "hr", "--bearer-file", files[1])
        said = await ctl(cluster, "change", "hr", "--url", old_url)
        assert "Dropped the sealed Authorization" in said and "another origin" in said
        assert "llmgw ctl mcp change hr --bearer-file" in said
        shown = json.loads(await ctl(cluster, "show", "hr", "--json"))
        assert shown["sealed_header_names"] == [] and shown["sealed_headers_dropped"] == []


async def test_a_change_within_the_origin_keeps_the_credentials(tmp_path, files):
    hr = hr_server(TOKEN)
    async with serve(hr) as url, running_cluster(tmp_path) as cluster:
        await ctl(cluster, "add", "hr", "--url", url, *files)
        # The same scheme, host and port: another path (…/mcp/, which hr answers with a
        # redirect to …/mcp, its own origin).
        kept = json.loads(await ctl(cluster, "change", "hr", "--url", url + "/", "--json"))
        assert kept["sealed_headers_dropped"] == []
        assert kept["sealed_header_names"] == ["Authorization", "X-Hr-Key"]
        said = await ctl(cluster, "change", "hr", "--url", url)
        assert "Dropped" not in said

        g = await granted(cluster)
        hr.requests.clear()
        async with g.client("a") as c:
            assert not (await c.call_tool("hr.lookup", {"name": "Ada"})).is_error
    assert set(hr.headers_seen("authorization")) == {f"Bearer {TOKEN}"}
    assert set(hr.headers_seen("x-hr-key")) == {API_KEY}


async def test_a_move_given_new_credentials_in_the_same_change_keeps_those(tmp_path, files):
    old, new = hr_server(TOKEN), hr_server("new-token-88a1")
    token = tmp_path / "new.token"
    token.write_text("new-token-88a1")
    async with (
        serve(old) as old_url,
        serve(new) as new_url,
        running_cluster(tmp_path) as cluster,
    ):
        await ctl(cluster, "add", "hr", "--url", old_url, *files)
        args = ("change", "hr", "--url", new_url, "--bearer-file", str(token), "--json")
        moved = json.loads(await ctl(cluster, *args))
        assert moved["sealed_headers_dropped"] == []
        assert moved["sealed_header_names"] == ["Authorization"]

        g = await granted(cluster)
        async with g.client("a") as c:
            assert not (await c.call_tool("hr.lookup", {"name": "Ada"})).is_error
    assert set(new.headers_seen("authorization")) == {"Bearer new-token-88a1"}
    assert new.headers_seen("x-hr-key") == []
