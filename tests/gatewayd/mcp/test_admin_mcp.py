"""The MCP admin RPCs (ctl mcp …, the console's MCP screen) over the admin port of a real gatewayd.

Company servers are the SDK's own (tests/fakes/mcp_servers.py); ``ctl mcp test`` reaches
them with the gateway's upstream client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web

from gatewayd.admin.mcp.checks import p99
from gatewayd.store.mcp_records import McpCallRow
from llmgw.admin_client import AdminClient
from llmgw.config import StoreConfig
from llmgw.errors import ConflictError, NotFoundError, UsageError
from llmgw.protojson import to_plain
from proto.llmgw.v1 import McpUsageRequest, PutMcpServerRequest
from tests.cluster_fixture import running_cluster
from tests.fakes.mcp_servers import hr_server, serve, wiki_server

SECRET = "s3cret-bearer-7f1c9a"


class Mcp:
    """A real gatewayd with the MCP runtime's parts, its admin API on a real gRPC port."""

    def __init__(self, cluster, rt, admin: AdminClient) -> None:
        self.cluster, self.rt, self.admin = cluster, rt, admin

    @property
    def store(self):
        return self.cluster.server.store


def with_mcp_settings(cfg) -> None:
    cfg.mcp.default_timeout_s = 5.0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def mcp(request, tmp_path):
    store = None
    if request.param == "postgres":
        store = StoreConfig(dsn=request.getfixturevalue("fresh_postgres_dsn"))
    async with running_cluster(tmp_path, store=store, configure=with_mcp_settings) as cluster:
        assert cluster.server.mcp is not None
        async with cluster.admin() as admin:
            yield Mcp(cluster, cluster.server.mcp, admin)


def add(name: str, url: str, **kw) -> PutMcpServerRequest:
    # As ctl mcp add sends it: every field named, enabled unless --disabled.
    kw.setdefault("enabled", True)
    return PutMcpServerRequest(name=name, create=True, url=url, set=["url", *kw], **kw)


def change(name: str, **kw) -> PutMcpServerRequest:
    return PutMcpServerRequest(name=name, set=list(kw), **kw)


# ---- servers --------------------------------------------------------------------


async def test_a_server_is_shown_with_header_names_and_no_secret_value_anywhere(mcp):
    added = await mcp.admin.put_mcp_server(
        add(
            "hr",
            "http://127.0.0.1:9/mcp",
            description="The staff directory",
            headers={"X-Team": "people"},
            secret_headers={"Authorization": f"Bearer {SECRET}"},
            rate_per_minute=30,
        )
    )
    listed = await mcp.admin.list_mcp_servers()
    shown = await mcp.admin.get_mcp_server("hr")
    for reply in (added, listed, shown):
        assert SECRET not in json.dumps(to_plain(reply))
    assert shown.header_names == ["X-Team"] and shown.sealed_header_names == ["Authorization"]
    assert shown.transport == "streamable_http" and shown.rate_per_minute == 30
    assert shown.timeout_s == 5.0  # mcp.default_timeout_s, as none was given
    assert shown.state == "unknown" and shown.breaker == "closed" and not shown.builtin
    # llmgw:admin comes first, built in; agents are pointed at the gateway's /mcp.
    assert [s.name for s in listed.servers] == ["llmgw:admin", "hr"]
    builtin = listed.servers[0]
    assert builtin.builtin and builtin.state == "ok" and "list_nodes" in builtin.tools
    gateway = mcp.cluster.server.info["gateway_url"]
    assert listed.endpoint == gateway.removesuffix("/v1") + "/mcp"
    # The store holds the credential sealed; the registry opens it for the upstream.
    (ref,) = await mcp.store.list_sealed_secret_refs()
    sealed = await mcp.store.get_sealed_secrets([ref])
    assert SECRET.encode() not in sealed[ref] and ref.startswith("mcp/hr/")
    assert (await mcp.rt.registry.headers_for("hr"))["Authorization"] == f"Bearer {SECRET}"


async def test_an_address_ending_in_sse_is_taken_as_the_sse_transport(mcp):
    view = await mcp.admin.put_mcp_server(add("wiki", "http://127.0.0.1:9/sse"))
    assert view.transport == "sse"


async def test_adding_a_name_twice_is_a_conflict_and_changing_a_missing_one_is_not_found(mcp):
    await mcp.admin.put_mcp_server(add("hr", "http://127.0.0.1:9/mcp"))
    with pytest.raises(ConflictError, match="llmgw ctl mcp change hr"):
        await mcp.admin.put_mcp_server(add("hr", "http://127.0.0.1:9/mcp"))
    with pytest.raises(NotFoundError, match="llmgw ctl mcp add jira"):
        await mcp.admin.put_mcp_server(change("jira", description="x"))
    with pytest.raises(NotFoundError, match="no MCP server named 'jira'"):
        await mcp.admin.get_mcp_server("jira")


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (add("hr", "http://bob:hunter2@10.0.0.5/mcp"), "may not carry a user or password"),
        (add("hr", "ftp://10.0.0.5/mcp"), "not an http:// or https:// address"),
        (add("Bad Name", "http://10.0.0.5/mcp"), "not a valid MCP server name"),
        (add("llmgw-tools", "http://10.0.0.5/mcp"), "kept for llmgw's own"),
        (add("llmgw:admin", "http://10.0.0.5/mcp"), "built in and read-only"),
        (
            add("hr", "http://10.0.0.5/mcp", headers={"Authorization": "Bearer x"}),
            "--bearer-file",
        ),
        (
            add("hr", "http://10.0.0.5/mcp", headers={"Mcp-Session-Id": "x"}),
            "set by the gateway itself",
        ),
        (
            add("hr", "http://10.0.0.5/mcp", headers={"X-Llmgw-Key-Id": "key_1"}),
            "set by the gateway itself",
        ),
        (add("hr", "http://10.0.0.5/mcp", headers={"X-A": "1\r\nX-B: 2"}), "line break"),
        (add("hr", "http://10.0.0.5/mcp", secret_headers={"X-Api-Key": " "}), "is empty"),
        (
            add("hr", "http://10.0.0.5/mcp", headers={"X-K": "a"}, secret_headers={"x-k": "b"}),
            "either sent as given or sealed",
        ),
        (add("hr", "http://10.0.0.5/mcp", rate_per_minute=-1), "calls a minute"),
        (add("hr", "http://10.0.0.5/mcp", timeout_s=7200), "the timeout must be"),
    ],
)
async def test_bad_names_addresses_and_headers_are_refused_in_words(mcp, request_, words):
    # Guards: an address with user:password@ stored as is (the credential shown in
    # lists and sent in clear); a header that the gateway sets being overridden.
    with pytest.raises(UsageError) as refused:
        await mcp.admin.put_mcp_server(request_)
    assert words in refused.value.message
    assert [s.name for s in (await mcp.admin.list_mcp_servers()).servers] == ["llmgw:admin"]


async def test_a_change_sets_only_what_it_names_and_a_new_credential_replaces_the_old(mcp):
    hr = hr_server(token=None)  # takes any credential: the test reads which one arrived
    async with serve(hr) as url:
        await mcp.admin.put_mcp_server(
            add("hr", url, secret_headers={"Authorization": "Bearer old"})
        )
        (old_ref,) = await mcp.store.list_sealed_secret_refs()
        first = await mcp.rt.pool.get("key:key_aa", "hr", caller={})

        view = await mcp.admin.put_mcp_server(change("hr", description="HR", rate_per_minute=5))
        assert view.description == "HR" and view.rate_per_minute == 5
        assert view.url == url and view.sealed_header_names == ["Authorization"]
        assert await mcp.store.list_sealed_secret_refs() == [old_ref]
        # Nothing a connection carries changed: the caller keeps its connection.
        assert await mcp.rt.pool.get("key:key_aa", "hr", caller={}) is first

        await mcp.admin.put_mcp_server(change("hr", secret_headers={"Authorization": "Bearer new"}))
        (new_ref,) = await mcp.store.list_sealed_secret_refs()
        assert new_ref != old_ref  # the old sealed value went with its ref
        # Guards: a replaced credential still used by connections opened before it.
        assert first.closed
        second = await mcp.rt.pool.get("key:key_aa", "hr", caller={})
        await second.list_tools()
        assert hr.headers_seen("authorization")[-1] == "Bearer new"
        assert mcp.rt.pool.opened_total == 2

    off = await mcp.admin.put_mcp_server(change("hr", enabled=False))
    assert off.state == "off" and not off.enabled
    with pytest.raises(UsageError, match="cannot change colour"):
        await mcp.admin.put_mcp_server(PutMcpServerRequest(name="hr", set=["colour"]))
    with pytest.raises(UsageError, match="say what to change"):
        await mcp.admin.put_mcp_server(PutMcpServerRequest(name="hr"))


async def test_a_change_reaches_the_registry_at_once(mcp):
    await mcp.admin.put_mcp_server(add("hr", "http://127.0.0.1:9/mcp"))
    assert mcp.rt.registry.get("hr").url == "http://127.0.0.1:9/mcp"
    await mcp.admin.put_mcp_server(change("hr", url="http://127.0.0.1:10/sse"))
    rec = mcp.rt.registry.get("hr")
    assert rec.url == "http://127.0.0.1:10/sse" and rec.transport == "sse"
    await mcp.admin.remove_mcp_server("hr")
    assert mcp.rt.registry.get("hr") is None


async def test_a_removed_server_takes_its_grants_and_credentials_and_llmgw_admin_stays(mcp):
    await mcp.admin.put_mcp_server(
        add("hr", "http://127.0.0.1:9/mcp", secret_headers={"Authorization": "Bearer x"})
    )
    await mcp.admin.create_tenant("org", "Acme")
    await mcp.admin.grant_mcp("Acme", "hr")
    await mcp.admin.grant_mcp("Acme", "hr.lookup")
    await mcp.admin.grant_mcp("Acme", "llmgw:admin")
    reply = await mcp.admin.remove_mcp_server("hr")
    assert reply.name == "hr" and reply.grants_removed == 2
    assert await mcp.store.list_sealed_secret_refs() == []
    grants = (await mcp.admin.list_mcp_grants()).grants
    assert [(g.scope, g.target) for g in grants] == [("org:Acme", "llmgw:admin")]
    with pytest.raises(NotFoundError):
        await mcp.admin.remove_mcp_server("hr")
    with pytest.raises(UsageError, match="built in; it cannot be removed"):
        await mcp.admin.remove_mcp_server("llmgw:admin")


# ---- ctl mcp test -----------------------------------------------------------------


async def test_a_test_lists_the_tools_of_a_streamable_http_and_an_sse_server(mcp):
    hr, wiki = hr_server(SECRET), wiki_server()
    async with serve(hr) as hr_url, serve(wiki) as wiki_url:
        await mcp.admin.put_mcp_server(
            add("hr", hr_url, secret_headers={"Authorization": f"Bearer {SECRET}"})
        )
        await mcp.admin.put_mcp_server(add("wiki", wiki_url))
        tested = await mcp.admin.test_mcp_server("hr")
        assert tested.ok, tested.error
        assert sorted(tested.tools) == ["lookup", "slow"] and tested.latency_ms > 0
        assert tested.protocol_version == "2026-07-28"
        assert SECRET not in json.dumps(to_plain(tested))
        wiki_tested = await mcp.admin.test_mcp_server("wiki")
        assert wiki_tested.ok, wiki_tested.error
        assert wiki_tested.tools == ["search"]
    # What was seen is what ctl mcp list shows, and the server counts as answering.
    shown = await mcp.admin.get_mcp_server("hr")
    assert sorted(shown.tools) == ["lookup", "slow"] and shown.state == "ok"
    # The sealed credential reached the server; the admin token never did.
    assert f"Bearer {SECRET}" in hr.headers_seen("authorization")
    assert all(mcp.cluster.token not in v for v in hr.headers_seen("authorization"))


async def test_a_server_of_the_session_era_is_tested_on_the_version_it_agreed_to(mcp):
    async with serve(hr_server(None, legacy_only=True)) as url:
        await mcp.admin.put_mcp_server(add("hr", url))
        tested = await mcp.admin.test_mcp_server("hr")
    assert tested.ok, tested.error
    assert tested.protocol_version == "2025-11-25" and "lookup" in tested.tools


async def test_a_refused_credential_is_told_in_plain_words(mcp):
    async with serve(hr_server(SECRET)) as url:
        await mcp.admin.put_mcp_server(
            add("hr", url, secret_headers={"Authorization": "Bearer wrong"})
        )
        tested = await mcp.admin.test_mcp_server("hr")
    assert not tested.ok and tested.tools == []
    assert "401: its credential was refused" in tested.error
    assert "llmgw ctl mcp change hr --bearer-file" in tested.error


async def test_nothing_listening_is_told_as_a_refused_connection(mcp):
    with contextlib.closing(__import__("socket").socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        await mcp.admin.put_mcp_server(add("hr", f"http://127.0.0.1:{port}/mcp"))
        tested = await mcp.admin.test_mcp_server("hr")
    assert not tested.ok and "refused" in tested.error, tested.error


async def test_a_server_that_never_answers_is_told_as_no_answer_within_its_timeout(mcp):
    accepted = asyncio.Event()

    async def hold(reader, writer):
        accepted.set()
        await reader.read()  # reads the request, answers nothing, until the client leaves
        writer.close()

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    async with silent:
        await mcp.admin.put_mcp_server(add("hr", f"http://127.0.0.1:{port}/mcp", timeout_s=0.5))
        tested = await mcp.admin.test_mcp_server("hr")
    assert accepted.is_set()
    assert not tested.ok and "0.5 s" in tested.error, tested.error


async def test_a_web_page_at_the_address_is_told_as_not_an_mcp_server(mcp):
    async def page(request):
        return web.Response(text="<html>hello</html>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/mcp", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        await mcp.admin.put_mcp_server(add("hr", f"http://127.0.0.1:{port}/mcp"))
        tested = await mcp.admin.test_mcp_server("hr")
    finally:
        await runner.cleanup()
    assert not tested.ok and "not an MCP server" in tested.error, tested


async def test_testing_llmgw_admin_lists_its_tools(mcp):
    tested = await mcp.admin.test_mcp_server("llmgw:admin")
    assert tested.ok and "node_logs" in tested.tools


# ---- grants ---------------------------------------------------------------------


async def key_in(mcp: Mcp, project: str) -> str:
    await mcp.admin.create_tenant("project", project, parents=True)
    return (await mcp.admin.create_key(project, name="agent")).key_id


async def test_a_grant_needs_a_key_level_and_server_that_exist(mcp):
    await mcp.admin.put_mcp_server(add("hr", "http://127.0.0.1:9/mcp"))
    key_id = await key_in(mcp, "Acme/ml/search")
    with pytest.raises(NotFoundError, match="no key 'key_0123'"):
        await mcp.admin.grant_mcp("key_0123", "hr")
    with pytest.raises(NotFoundError, match="no team 'Acme/web'"):
        await mcp.admin.grant_mcp("Acme/web", "hr")
    with pytest.raises(NotFoundError, match="no MCP server named 'jira'"):
        await mcp.admin.grant_mcp("Acme", "jira")
    with pytest.raises(NotFoundError, match="has no tool 'drop'"):
        await mcp.admin.grant_mcp("Acme", "llmgw:admin.drop")
    with pytest.raises(UsageError, match="neither a key id"):
        await mcp.admin.grant_mcp("Acme//x", "hr")
    made = await mcp.admin.grant_mcp(key_id, "hr.lookup")
    assert made.changed and made.grant.scope == f"key:{key_id}"
    assert made.grant.target == "hr.lookup" and made.grant.created_at
    again = await mcp.admin.grant_mcp(key_id, "hr.lookup")
    assert not again.changed and again.grant.created_at == made.grant.created_at
    admin_grant = await mcp.admin.grant_mcp("Acme/ml", "llmgw_admin.list_nodes")
    assert admin_grant.grant.target == "llmgw:admin.list_nodes"
    assert (await mcp.admin.get_mcp_server("hr")).grants[0].target == "hr.lookup"


async def test_a_grant_reaches_the_registry_at_once(mcp):
    await mcp.admin.put_mcp_server(add("hr", "http://127.0.0.1:9/mcp"))
    key_id = await key_in(mcp, "Acme/ml/search")
    key = next(i for i in mcp.cluster.server.keys._by_hash.values() if i.key_id == key_id)
    assert not mcp.rt.registry.allowed(key, "hr", "lookup")
    await mcp.admin.grant_mcp("Acme/ml", "hr")
    assert mcp.rt.registry.allowed(key, "hr", "lookup")
    await mcp.admin.revoke_mcp("Acme/ml", "hr")
    assert not mcp.rt.registry.allowed(key, "hr", "lookup")


async def test_a_revoke_says_which_grants_above_still_give_the_tool(mcp):
    await mcp.admin.put_mcp_server(add("hr", "http://127.0.0.1:9/mcp"))
    key_id = await key_in(mcp, "Acme/ml/search")
    await mcp.admin.grant_mcp("Acme", "hr")
    await mcp.admin.grant_mcp("Acme/ml", "hr.lookup")
    await mcp.admin.grant_mcp(key_id, "hr.lookup")
    revoked = await mcp.admin.revoke_mcp(key_id, "hr.lookup")
    assert revoked.changed and revoked.grant.target == "hr.lookup"
    assert revoked.still_granted_by == [
        "org:Acme is granted hr (every tool)",
        "team:Acme/ml is granted hr.lookup",
    ]
    again = await mcp.admin.revoke_mcp(key_id, "hr.lookup")
    assert not again.changed
    # The org's own grant, revoked, leaves nothing above it.
    top = await mcp.admin.revoke_mcp("Acme", "hr")
    assert top.changed and top.still_granted_by == []


async def test_grants_listed_for_a_key_are_its_own_and_those_of_its_levels(mcp):
    await mcp.admin.put_mcp_server(add("hr", "http://127.0.0.1:9/mcp"))
    await mcp.admin.put_mcp_server(add("wiki", "http://127.0.0.1:9/sse"))
    key_id = await key_in(mcp, "Acme/ml/search")
    await key_in(mcp, "Acme/web/shop")
    await mcp.admin.grant_mcp("Acme", "wiki")
    await mcp.admin.grant_mcp("Acme/ml/search", "hr")
    await mcp.admin.grant_mcp("Acme/web", "hr")
    await mcp.admin.grant_mcp(key_id, "llmgw:admin")
    mine = (await mcp.admin.list_mcp_grants(key_id)).grants
    assert sorted((g.scope, g.target) for g in mine) == sorted(
        [
            (f"key:{key_id}", "llmgw:admin"),
            ("org:Acme", "wiki"),
            ("project:Acme/ml/search", "hr"),
        ]
    )
    hr_only = (await mcp.admin.list_mcp_grants(server="hr")).grants
    assert [g.scope for g in hr_only] == ["project:Acme/ml/search", "team:Acme/web"]
    web = (await mcp.admin.list_mcp_grants("Acme/web", server="hr")).grants
    assert [(g.scope, g.target) for g in web] == [("team:Acme/web", "hr")]


# ---- usage --------------------------------------------------------------------------


async def test_usage_groups_the_calls_with_their_p99_and_errors(mcp):
    t0 = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)

    def row(i: int, server: str, tool: str, status: str, ms: float) -> McpCallRow:
        return McpCallRow(
            at=t0 + timedelta(seconds=i),
            key_id="key_aa",
            project="Acme/ml/search",
            server=server,
            tool=tool,
            status=status,
            latency_ms=ms,
            bytes_in=100,
            bytes_out=1000,
        )

    rows = [row(i, "hr", "lookup", "ok", float(i + 1)) for i in range(100)]
    rows += [row(200, "hr", "lookup", "timeout", 5000.0), row(201, "wiki", "search", "ok", 3.0)]
    await mcp.store.record_mcp_calls(rows)

    reply = await mcp.admin.mcp_usage(McpUsageRequest(by=["server", "tool"]))
    assert reply.calls == 102
    first, second = reply.groups
    assert first.group == {"server": "hr", "tool": "lookup"} and first.calls == 101
    assert first.errors == 1 and first.bytes_in == 10100 and first.bytes_out == 101000
    assert first.latency_ms_p99 == 100.0  # nearest rank: the 100th of 101
    assert second.group == {"server": "wiki", "tool": "search"} and second.latency_ms_avg == 3.0

    by_status = await mcp.admin.mcp_usage(McpUsageRequest(by=["status"], server="hr"))
    assert {g.group["status"]: g.calls for g in by_status.groups} == {"ok": 100, "timeout": 1}
    window = await mcp.admin.mcp_usage(
        McpUsageRequest(by=["key"], from_="2026-09-01T12:00:10", to="2026-09-01T12:00:20")
    )
    assert window.calls == 10 and window.groups[0].group == {"key": "key_aa"}
    with pytest.raises(UsageError, match="group by any of"):
        await mcp.admin.mcp_usage(McpUsageRequest(by=["model"]))
    with pytest.raises(UsageError, match="is not a date"):
        await mcp.admin.mcp_usage(McpUsageRequest(from_="yesterday"))


def test_p99_is_the_nearest_rank():
    assert p99([]) == 0.0
    assert p99([7.0]) == 7.0
    assert p99([float(i) for i in range(1, 101)]) == 99.0
    assert p99([float(i) for i in range(1, 1001)]) == 990.0


async def test_with_the_mcp_gateway_off_changes_are_refused_saying_how_to_turn_it_on(tmp_path):
    def off(cfg) -> None:
        cfg.mcp.enabled = False

    async with running_cluster(tmp_path, configure=off) as cluster, cluster.admin() as admin:
        listed = await admin.list_mcp_servers()
        assert [(s.name, s.state) for s in listed.servers] == [("llmgw:admin", "off")]
        with pytest.raises(UsageError, match=r"mcp: \{enabled: true\} in server.yaml"):
            await admin.put_mcp_server(add("hr", "http://127.0.0.1:9/mcp"))
