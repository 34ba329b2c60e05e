"""/mcp as an agent meets it: the official SDK client, both protocol generations, a real gatewayd.

One gatewayd and one company server (hr, bearer token) for the whole module;
tests name their own keys and grants so they do not see each other's.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from mcp.shared.exceptions import MCPError

from tests.cluster_fixture import running_cluster, wait_for
from tests.fakes.mcp_servers import change_tools, hr_server, serve, wiki_server
from tests.gatewayd.mcp.endpoint.kit import Gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")
MODES = ["auto", "legacy"]
HR_TOKEN = "hr-s3cret"


def _configure(cfg) -> None:
    cfg.mcp.breaker_failures = 2


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(tmp_path_factory):
    hr, wiki = hr_server(HR_TOKEN), wiki_server()
    async with (
        serve(hr) as hr_url,
        serve(wiki) as wiki_url,
        running_cluster(tmp_path_factory.mktemp("mcp"), configure=_configure) as cluster,
    ):
        g = Gateway(cluster)
        g.hr, g.hr_url = hr, hr_url
        await g.add_server("hr", hr_url, bearer=HR_TOKEN)
        await g.add_server("wiki", wiki_url)
        # The acceptance's two keys: A's project is granted hr.lookup, B nothing.
        await g.key("a", "Acme/ml/search")
        await g.key("b", "Acme/ops/infra")
        await g.grant("project:Acme/ml/search", "hr.lookup")
        yield g


def _names(listed) -> list[str]:
    return sorted(t.name for t in listed.tools)


@pytest.mark.parametrize("mode", MODES)
async def test_a_granted_key_lists_only_its_tools_named_server_dot_tool(gw, mode):
    async with gw.client("a", mode) as c:
        assert _names(await c.list_tools()) == ["hr.lookup"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_reaches_the_server_with_its_sealed_token_and_never_the_callers_key(gw, mode):
    gw.hr.requests.clear()
    async with gw.client("a", mode) as c:
        r = await c.call_tool("hr.lookup", {"name": "Ada"})
    assert not r.is_error
    assert r.structured_content == {"name": "Ada", "email": "ada@example.com", "team": "people"}
    seen = gw.hr.requests
    assert seen and {q.headers.get("authorization") for q in seen} == {f"Bearer {HR_TOKEN}"}
    assert all(gw.keys["a"] not in v for q in seen for v in q.headers.values())
    assert {q.headers.get("x-llmgw-key-id") for q in seen} == {gw.key_ids["a"]}


@pytest.mark.parametrize("mode", MODES)
async def test_a_key_with_no_grant_lists_nothing_and_its_call_is_refused_as_unknown(gw, mode):
    async with gw.client("b", mode) as c:
        assert _names(await c.list_tools()) == []
        with pytest.raises(MCPError) as refused:
            await c.call_tool("hr.lookup", {"name": "Ada"})
    assert refused.value.code == -32602
    assert refused.value.error.message == "Unknown tool: hr.lookup"


@pytest.mark.parametrize("mode", MODES)
async def test_an_ungranted_tool_is_refused_exactly_as_one_that_does_not_exist(gw, mode):
    # Guards: a caller telling "not granted" from "absent" learns what servers hold.
    await gw.key(f"c-{mode}", "Acme/ml/ranking")
    await gw.grant("project:Acme/ml/ranking", "hr")  # every tool of hr
    answers = []
    async with gw.client(f"c-{mode}", mode) as c:
        for name in ("hr.nothing", "wiki.search"):
            with pytest.raises(MCPError) as refused:
                await c.call_tool(name, {})
            answers.append((refused.value.code, refused.value.error.message.replace(name, "X")))
    async with gw.client("a", mode) as c:  # a: only hr.lookup of hr
        with pytest.raises(MCPError) as refused:
            await c.call_tool("hr.slow", {"seconds": 0})
        answers.append((refused.value.code, refused.value.error.message.replace("hr.slow", "X")))
    assert answers == [(-32602, "Unknown tool: X")] * 3


async def test_a_legacy_session_opens_one_upstream_connection_for_all_its_calls(gw):
    pool = gw.rt.pool
    before = pool.opened_total
    async with gw.client("a", "legacy") as c:
        for who in ("Ada", "Grace", "Edsger"):
            assert not (await c.call_tool("hr.lookup", {"name": who})).is_error
        await c.list_tools()
        (sid,) = gw.rt.endpoint.legacy.sessions
        assert pool.owners("hr").count(sid) == 1
    assert pool.opened_total == before + 1
    # Its end (DELETE) closed that connection.
    assert sid not in pool.owners("hr")


async def test_two_legacy_sessions_of_one_key_never_share_an_upstream_connection(gw):
    pool = gw.rt.pool
    before = pool.opened_total
    async with gw.client("a", "legacy") as one, gw.client("a", "legacy") as two:
        await one.call_tool("hr.lookup", {"name": "Ada"})
        await two.call_tool("hr.lookup", {"name": "Ada"})
    assert pool.opened_total == before + 2


async def test_a_session_ends_on_delete_and_its_id_is_then_unknown(gw):
    sessions = gw.rt.endpoint.legacy.sessions
    async with gw.client("a", "legacy") as c:
        await c.list_tools()
        assert len(sessions) == 1
    assert sessions == {}


async def test_an_idle_session_ends_and_its_upstream_is_closed(gw):
    legacy = gw.rt.endpoint.legacy
    now = [1000.0]
    legacy.clock = lambda: now[0]
    try:
        async with gw.client("a", "legacy") as c:
            await c.call_tool("hr.lookup", {"name": "Ada"})
            (sid,) = legacy.sessions
            assert sid in gw.rt.pool.owners("hr")
            # Its GET stream is open: while it is, the session is in use.
            await wait_for(lambda: legacy.sessions[sid].stream is not None)
            legacy.sessions[sid].stream.end()
            await wait_for(lambda: legacy.sessions[sid].stream is None)
            now[0] += legacy.idle_s + 1
            assert await legacy.expire_idle() == 1
            assert sid not in gw.rt.pool.owners("hr")
            with pytest.raises(MCPError):
                await c.call_tool("hr.lookup", {"name": "Ada"})
    finally:
        legacy.clock = time.monotonic


async def test_llmgw_admin_is_granted_like_any_server_and_answers_in_process(gw):
    await gw.key("ops", "Acme/ops/sre")
    await gw.grant("project:Acme/ops/sre", "llmgw:admin.cluster_status")
    async with gw.client("ops") as c:
        assert _names(await c.list_tools()) == ["llmgw_admin.cluster_status"]
        r = await c.call_tool("llmgw_admin.cluster_status", {})
    assert not r.is_error and r.structured_content is not None


async def test_a_grant_given_reaches_an_open_listen_stream_and_the_tool_is_listed(gw):
    await gw.key("d", "Acme/ml/vision")
    async with gw.client("d") as c, c.listen(tools_list_changed=True) as sub:
        assert _names(await c.list_tools()) == []
        await gw.grant("team:Acme/ml", "hr.lookup")  # a grant to the team reaches its projects
        await asyncio.wait_for(anext(sub), 30)
        assert _names(await c.list_tools()) == ["hr.lookup"]
        await gw.revoke("team:Acme/ml", "hr.lookup")
        await asyncio.wait_for(anext(sub), 30)
        assert _names(await c.list_tools()) == []


async def test_a_grant_given_reaches_an_open_session_stream_as_list_changed(gw):
    await gw.key("d2", "Acme/ml/audio")
    changed = asyncio.Event()

    async def on_message(message):
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            changed.set()

    async with gw.client("d2", "legacy", message_handler=on_message) as c:
        assert _names(await c.list_tools()) == []
        (sid,) = [
            s for s, v in gw.rt.endpoint.legacy.sessions.items() if v.key_id == gw.key_ids["d2"]
        ]
        await wait_for(lambda: gw.rt.endpoint.streams.count(sid) == 1)  # its GET stream
        await gw.grant("org:Acme", "hr.lookup")  # a grant to the organisation reaches all
        await asyncio.wait_for(changed.wait(), 30)
        assert _names(await c.list_tools()) == ["hr.lookup"]
    await gw.revoke("org:Acme", "hr.lookup")


async def test_an_upstream_list_change_is_relayed_to_the_owners_session_stream(gw):
    await gw.key("e", "Acme/hr/people")
    await gw.grant("project:Acme/hr/people", "hr")
    changed = asyncio.Event()

    async def on_message(message):
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            changed.set()

    async with gw.client("e", "legacy", message_handler=on_message) as c:
        assert "hr.vacation" not in _names(await c.list_tools())
        await change_tools(gw.hr, "vacation")
        await asyncio.wait_for(changed.wait(), 30)
        assert "hr.vacation" in _names(await c.list_tools())


async def test_an_upstream_list_change_is_relayed_to_the_keys_listen_stream(gw):
    await gw.key("e2", "Acme/hr/payroll")
    await gw.grant("project:Acme/hr/payroll", "hr")
    async with gw.client("e2") as c, c.listen(tools_list_changed=True) as sub:
        assert "hr.sickdays" not in _names(await c.list_tools())  # opens its hr connection
        await change_tools(gw.hr, "sickdays")
        await asyncio.wait_for(anext(sub), 30)
        assert "hr.sickdays" in _names(await c.list_tools())


@pytest.mark.parametrize("mode", MODES)
async def test_a_server_over_http_and_sse_is_listed_and_called_like_any_other(gw, mode):
    await gw.key(f"w-{mode}", f"Acme/docs/{mode}")
    await gw.grant(f"key:{gw.key_ids[f'w-{mode}']}", "wiki")
    async with gw.client(f"w-{mode}", mode) as c:
        assert _names(await c.list_tools()) == ["wiki.search"]
        r = await c.call_tool("wiki.search", {"q": "leave"})
    assert not r.is_error and "leave — onboarding" in str(r.structured_content)


async def test_calls_past_the_servers_rate_are_refused_with_a_retry_hint(gw):
    await gw.add_server("hrrate", gw.hr_url, bearer=HR_TOKEN, rate_per_minute=2)
    await gw.key("f", "Acme/ml/rate")
    await gw.grant("project:Acme/ml/rate", "hrrate")
    async with gw.client("f") as c:
        for _ in range(2):
            assert not (await c.call_tool("hrrate.lookup", {"name": "Ada"})).is_error
        with pytest.raises(MCPError) as refused:
            await c.call_tool("hrrate.lookup", {"name": "Ada"})
    e = refused.value.error
    assert e.code == -32001 and "at most 2 calls a minute to hrrate" in e.message
    assert e.data["server"] == "hrrate" and e.data["retryAfterSeconds"] >= 1


async def test_a_call_past_the_servers_timeout_says_so_naming_the_server(gw):
    await gw.add_server("hrslow", gw.hr_url, bearer=HR_TOKEN, timeout_s=0.2)
    await gw.key("g", "Acme/ml/slow")
    await gw.grant("project:Acme/ml/slow", "hrslow.slow")
    async with gw.client("g") as c:
        with pytest.raises(MCPError) as refused:
            await c.call_tool("hrslow.slow", {"seconds": 60})
    assert refused.value.code == -32003
    assert refused.value.error.message == "hrslow did not answer within 0.2 s"


@pytest.mark.parametrize("mode", MODES)
async def test_a_server_that_cannot_be_reached_opens_its_breaker_and_is_named(gw, mode):
    name = f"gone{mode}"
    await gw.add_server(name, "http://127.0.0.1:9/mcp")  # discard port: nothing listens
    await gw.key(f"h-{mode}", f"Acme/ml/gone{mode}")
    await gw.grant(f"project:Acme/ml/gone{mode}", name)
    async with gw.client(f"h-{mode}", mode) as c:
        for _ in range(2):  # breaker_failures: 2
            with pytest.raises(MCPError) as failed:
                await c.call_tool(f"{name}.lookup", {})
            assert failed.value.code == -32002
            assert failed.value.error.message.startswith(f"{name} could not be reached")
        with pytest.raises(MCPError) as off:
            await c.call_tool(f"{name}.lookup", {})
    assert off.value.code == -32002
    assert off.value.error.message.startswith(f"{name} is not answering (")
    assert "its tools are off until a trial call in" in off.value.error.message
    assert gw.rt.breakers.state(name)[0] == "open"


async def test_every_call_leaves_a_row_and_a_metric(gw):
    await gw.key("i", "Acme/ml/books")
    await gw.grant("project:Acme/ml/books", "hr.lookup")
    async with gw.client("i") as c:
        await c.call_tool("hr.lookup", {"name": "Ada"})
        with pytest.raises(MCPError):
            await c.call_tool("hr.slow", {"seconds": 0})
    await gw.rt.writer.flush()
    rows = await gw.server.store.list_mcp_calls(key_id=gw.key_ids["i"])
    assert sorted((r.server, r.tool, r.status) for r in rows) == [
        ("hr", "lookup", "ok"),
        ("hr", "slow", "not_found"),
    ]
    assert all(r.bytes_in > 0 and r.bytes_out > 0 and r.latency_ms > 0 for r in rows)
    metrics = gw.server.metrics.registry
    ok = metrics.get_sample_value(
        "llmgw_mcp_calls_total", {"server": "hr", "tool": "lookup", "status": "ok"}
    )
    assert ok is not None and ok >= 1


async def test_a_credential_changed_in_the_store_by_another_control_plane_is_used_next_call(gw):
    # Guards: a control plane that did not take the change itself kept its open
    # upstream connections, so callers there went on with the old credential.
    second = hr_server("old-token")
    async with serve(second) as url:
        await gw.add_server("hr2", url, bearer="old-token")
        await gw.key("x", "Acme/ml/rotate")
        await gw.grant("project:Acme/ml/rotate", "hr2")
        async with gw.client("x") as c:
            assert not (await c.call_tool("hr2.lookup", {"name": "Ada"})).is_error
            assert gw.rt.pool.owners("hr2") == [f"key:{gw.key_ids['x']}"]
            # The company rotates its token; another control plane's admin call writes the
            # new one to the shared store, and this one only reads the store again.
            second.token = "new-token"
            await gw.add_server("hr2", url, bearer="new-token")
            await wait_for(lambda: not gw.rt.pool.owners("hr2"))
            assert not (await c.call_tool("hr2.lookup", {"name": "Ada"})).is_error
    assert second.headers_seen("authorization")[-1] == "Bearer new-token"
