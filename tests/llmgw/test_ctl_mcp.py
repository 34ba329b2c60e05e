"""`llmgw ctl mcp …` as an operator types it, against a real admin server.

The server is the console tests' fake admin (real grpclib, the real token
check) with the Mcp* RPCs answered from dicts here, so these tests see exactly
what ctl sends (the credentials read from files) and what it prints. The same
commands against a real gatewayd, real MCP servers and the official SDK client:
tests/e2e/test_mcp_acceptance.py.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from typer.testing import CliRunner

from llmgw.cli.main import app as llmgw_cli
from llmgw.errors import ExitCode
from llmgw.mcp.names import ADMIN_SERVER, grant_target, parse_what, parse_who
from llmgw.paths import Paths
from llmgw.present.mcpfmt import client_config
from llmgw.setup.cluster_init import init_server
from proto.llmgw.v1 import (
    ListMcpGrantsReply,
    ListMcpGrantsRequest,
    ListMcpServersReply,
    ListMcpServersRequest,
    McpGrantReply,
    McpGrantRequest,
    McpGrantView,
    McpServerRequest,
    McpServerView,
    McpTestReply,
    McpUsageGroup,
    McpUsageReply,
    McpUsageRequest,
    PutMcpServerRequest,
    RemoveMcpServerReply,
)
from tests.tui.kit.fake_admin import TOKEN, FakeAdminServer, FakeAdminService

ENDPOINT = "http://127.0.0.1:8080/mcp"
TOKEN_VALUE = "hr-service-token-5f2c9a"
AT = "2026-09-01T12:00:00+00:00"


class FakeMcpService(FakeAdminService):
    """The Mcp* RPCs as gatewayd answers them, over dicts; every PutMcpServer kept."""

    def __init__(self) -> None:
        super().__init__()
        self.servers: dict[str, McpServerView] = {}
        # What each server's sealed headers would hold (the fake keeps values to check them).
        self.sealed: dict[str, dict[str, str]] = {}
        self.puts: list[PutMcpServerRequest] = []
        self.grants: list[McpGrantView] = []
        self.usage_requests: list[McpUsageRequest] = []
        self.test_reply: McpTestReply | None = None

    def _view(self, name: str) -> McpServerView:
        if name in (ADMIN_SERVER, "llmgw_admin"):
            return McpServerView(name=ADMIN_SERVER, builtin=True, enabled=True, state="ok")
        view = self.servers.get(name)
        if view is None:
            raise GRPCError(Status.NOT_FOUND, f"no MCP server {name!r}")
        view.grants = [g for g in self.grants if g.target.partition(".")[0] == name]
        return view

    async def list_mcp_servers(self, message: ListMcpServersRequest) -> ListMcpServersReply:
        views = [self._view(ADMIN_SERVER), *(self._view(n) for n in sorted(self.servers))]
        return ListMcpServersReply(servers=views, endpoint=ENDPOINT)

    async def get_mcp_server(self, message: McpServerRequest) -> McpServerView:
        return self._view(message.name)

    async def put_mcp_server(self, message: PutMcpServerRequest) -> McpServerView:
        self.puts.append(message)
        if message.create:
            if message.name in self.servers:
                raise GRPCError(Status.ALREADY_EXISTS, f"an MCP server {message.name!r} exists")
            self.servers[message.name] = McpServerView(
                name=message.name, transport="streamable_http", state="unknown", breaker="closed"
            )
            self.sealed[message.name] = {}
        view = self._view(message.name)
        fields = message.set if not message.create else PUT_FIELDS
        for f in fields:
            if f == "headers":
                view.header_names = sorted(message.headers)
            elif f == "secret_headers":
                view.sealed_header_names = sorted(message.secret_headers)
                self.sealed[message.name] = dict(message.secret_headers)
            elif f == "rate_per_minute":
                view.rate_per_minute = message.rate_per_minute
            else:
                setattr(view, f, getattr(message, f))
        view.transport = "sse" if view.url.endswith("/sse") else "streamable_http"
        return view

    async def remove_mcp_server(self, message: McpServerRequest) -> RemoveMcpServerReply:
        view = self._view(message.name)
        del self.servers[message.name]
        gone = [g for g in self.grants if g in view.grants]
        self.grants = [g for g in self.grants if g not in gone]
        return RemoveMcpServerReply(name=message.name, grants_removed=len(gone))

    async def test_mcp_server(self, message: McpServerRequest) -> McpTestReply:
        self._view(message.name)
        return self.test_reply or McpTestReply(
            name=message.name,
            ok=True,
            tools=["lookup", "slow"],
            protocol_version="2026-07-28",
            latency_ms=3.25,
        )

    def _grant_of(self, message: McpGrantRequest) -> McpGrantView:
        server, tool = parse_what(message.what)
        self._view(server)
        return McpGrantView(
            scope=parse_who(message.who).scope, target=grant_target(server, tool), created_at=AT
        )

    async def grant_mcp(self, message: McpGrantRequest) -> McpGrantReply:
        g = self._grant_of(message)
        known = any((h.scope, h.target) == (g.scope, g.target) for h in self.grants)
        if not known:
            self.grants.append(g)
        return McpGrantReply(grant=g, changed=not known)

    async def revoke_mcp(self, message: McpGrantRequest) -> McpGrantReply:
        g = self._grant_of(message)
        kept = [h for h in self.grants if (h.scope, h.target) != (g.scope, g.target)]
        changed, self.grants = len(kept) != len(self.grants), kept
        # Levels above the one revoked that still give the server.
        parts = g.scope.partition(":")[2].split("/")
        above = {f"{('org', 'team')[i]}:{'/'.join(parts[: i + 1])}" for i in range(len(parts) - 1)}
        still = [f"{h.scope} ({h.target})" for h in self.grants if h.scope in above]
        return McpGrantReply(grant=g, changed=changed, still_granted_by=still)

    async def list_mcp_grants(self, message: ListMcpGrantsRequest) -> ListMcpGrantsReply:
        shown = [
            g for g in self.grants if not message.server or g.target.startswith(message.server)
        ]
        return ListMcpGrantsReply(grants=shown)

    async def mcp_usage(self, message: McpUsageRequest) -> McpUsageReply:
        self.usage_requests.append(message)
        groups = [
            McpUsageGroup(
                group={"server": "hr", "tool": "lookup"},
                calls=12,
                errors=1,
                latency_ms_avg=4.5,
                latency_ms_p99=9.25,
                bytes_in=1200,
                bytes_out=34_000,
            )
        ]
        return McpUsageReply(groups=groups, calls=12)


PUT_FIELDS = [
    "url",
    "description",
    "headers",
    "secret_headers",
    "timeout_s",
    "rate_per_minute",
    "enabled",
]


@pytest.fixture
async def home(tmp_path):
    """An LLMGW_HOME whose server.yaml and admin token name the fake admin server."""
    service = FakeMcpService()
    async with FakeAdminServer(service=service) as srv:
        paths = Paths.under(tmp_path / "home")
        init_server(paths, hosts=["localhost"], ports={"admin": srv.port})
        paths.admin_token_file.write_text(TOKEN)
        yield paths.home, service


async def ctl(home, *args: str, input: str | None = None):
    def run():
        return CliRunner().invoke(
            llmgw_cli,
            ["ctl", "mcp", *args],
            env={"LLMGW_HOME": str(home), "COLUMNS": "200"},
            input=input,
        )

    return await asyncio.to_thread(run)


def said(res) -> str:
    """stderr as one line (the terminal wraps long messages)."""
    return " ".join(res.stderr.split())


@pytest.fixture
def token_file(tmp_path):
    f = tmp_path / "hr.token"
    f.write_text(TOKEN_VALUE + "\n")
    return f


async def add_hr(home, token_file, *extra: str):
    res = await ctl(
        home, "add", "hr", "--url", "http://127.0.0.1:9/mcp", "--bearer-file", str(token_file),
        *extra,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return res


async def test_add_sends_the_bearer_file_as_a_sealed_header_and_never_prints_it(home, token_file):
    home, service = home
    res = await add_hr(
        home, token_file, "--header", "X-Tenant=acme", "--description", "People directory",
        "--timeout", "5", "--rate", "60",
    )  # fmt: skip
    sent = service.puts[-1]
    assert sent.create and sent.name == "hr" and sent.url == "http://127.0.0.1:9/mcp"
    # The file's content stripped of its newline, as one Authorization header to seal.
    assert sent.secret_headers == {"Authorization": f"Bearer {TOKEN_VALUE}"}
    assert sent.headers == {"X-Tenant": "acme"}
    assert (sent.timeout_s, sent.rate_per_minute, sent.enabled) == (5.0, 60, True)
    assert TOKEN_VALUE not in res.output
    assert "Authorization" in res.stdout and "X-Tenant" in res.stdout
    # It ends with the next steps: test it, then grant it.
    assert "Check it: llmgw ctl mcp test hr" in res.stdout
    assert "llmgw ctl mcp grant WHO hr (or hr.TOOL)" in res.stdout
    assert "How an agent points at /mcp with its own key: llmgw ctl mcp list" in res.stdout


async def test_add_json_is_the_admin_reply_and_names_headers_only(home, token_file):
    home, _ = home
    res = await add_hr(home, token_file, "--header-file", f"X-Api-Key={token_file}", "--json")
    reply = json.loads(res.stdout)
    assert reply["name"] == "hr" and reply["sealed_header_names"] == ["Authorization", "X-Api-Key"]
    assert TOKEN_VALUE not in res.stdout


async def test_credential_files_are_refused_in_words_before_any_call(home, tmp_path):
    """Guards: a typo'd path sealing an empty credential, and a secret echoed in an error."""
    home, service = home
    empty = tmp_path / "empty.token"
    empty.write_text("  \n")
    two_lines = tmp_path / "two.token"
    two_lines.write_text(f"{TOKEN_VALUE}\nsecond\n")
    unreadable = tmp_path / "locked.token"
    unreadable.write_text(TOKEN_VALUE)
    unreadable.chmod(0)
    cases = [
        (["--bearer-file", str(tmp_path / "nope")], "--bearer-file", "no such file"),
        (["--bearer-file", str(empty)], str(empty), "is empty"),
        (["--bearer-file", str(tmp_path)], str(tmp_path), "is a folder"),
        (["--header-file", f"X-Key={two_lines}"], "X-Key", "more than one line"),
        (["--header-file", "X-Key="], "X-Key", "names no file"),
    ]
    if os.geteuid() != 0:  # root reads any file
        cases.append((["--bearer-file", str(unreadable)], "--bearer-file", "cannot be read"))
    for extra, named, why in cases:
        res = await ctl(home, "add", "hr", "--url", "http://127.0.0.1:9/mcp", *extra)
        assert res.exit_code == ExitCode.USAGE, (extra, res.output)
        assert named in said(res) and why in said(res), said(res)
        assert TOKEN_VALUE not in res.output
    assert service.puts == []


async def test_a_credential_typed_as_a_plain_header_is_refused_without_echoing_it(home):
    home, service = home
    for name in ("Authorization", "X-Api-Key", "X-Auth-Token"):
        res = await ctl(
            home, "add", "hr", "--url", "http://h/mcp", "--header", f"{name}={TOKEN_VALUE}"
        )
        assert res.exit_code == ExitCode.USAGE
        assert "looks like a credential" in said(res) and f"--header-file {name}=FILE" in said(res)
        assert TOKEN_VALUE not in res.output
    for name in ("Mcp-Session-Id", "X-Llmgw-Key-Id"):
        res = await ctl(home, "add", "hr", "--url", "http://h/mcp", "--header", f"{name}=x")
        assert res.exit_code == ExitCode.USAGE and "set by the gateway itself" in said(res)
    res = await ctl(home, "add", "hr", "--url", "http://h/mcp", "--header", "X-Tenant")
    assert res.exit_code == ExitCode.USAGE and "NAME=VALUE" in said(res)
    assert service.puts == []


async def test_a_header_given_twice_by_any_flag_is_refused(home, token_file):
    home, service = home
    res = await ctl(
        home, "add", "hr", "--url", "http://h/mcp", "--bearer-file", str(token_file),
        "--header-file", f"authorization={token_file}",
    )  # fmt: skip
    assert res.exit_code == ExitCode.USAGE and "given twice" in said(res)
    assert service.puts == []


async def test_addresses_with_a_password_and_bad_names_are_refused_before_any_call(home):
    home, service = home
    res = await ctl(home, "add", "hr", "--url", "https://bob:pw@hr.example/mcp")
    assert res.exit_code == ExitCode.USAGE and "--bearer-file" in said(res)
    assert "pw" not in res.output
    res = await ctl(home, "add", "Hr Server", "--url", "http://h/mcp")
    assert res.exit_code == ExitCode.USAGE and "not a valid MCP server name" in said(res)
    res = await ctl(home, "add", "llmgw-tools", "--url", "http://h/mcp")
    assert res.exit_code == ExitCode.USAGE and "kept for llmgw" in said(res)
    res = await ctl(home, "add", "hr", "--url", "ftp://h/mcp")
    assert res.exit_code == ExitCode.USAGE and "not an http:// or https://" in said(res)
    assert service.puts == []


async def test_adding_a_name_twice_is_a_conflict(home, token_file):
    home, _ = home
    await add_hr(home, token_file)
    res = await ctl(home, "add", "hr", "--url", "http://h/mcp")
    assert res.exit_code == ExitCode.CONFLICT and "exists" in said(res)


async def test_list_shows_state_breaker_headers_and_how_an_agent_points_at_mcp(home, token_file):
    home, service = home
    await add_hr(home, token_file, "--rate", "30")
    await ctl(home, "add", "wiki", "--url", "http://127.0.0.1:9/sse", "--header", "X-Team=ml")
    service.servers["wiki"].breaker = "open"
    service.servers["wiki"].breaker_reason = "connection refused"
    service.servers["wiki"].state = "failing"
    res = await ctl(home, "list")
    assert res.exit_code == 0, res.output
    out = res.stdout
    hr = next(line for line in out.splitlines() if line.lstrip("│ ").startswith("hr "))
    assert "30/min" in hr and "Authorization (sealed)" in hr and "http://127.0.0.1:9/mcp" in hr
    wiki = next(line for line in out.splitlines() if line.lstrip("│ ").startswith("wiki "))
    assert "failing" in wiki and "open: connection refused" in wiki and "(SSE)" in wiki
    assert "X-Team" in wiki
    assert ADMIN_SERVER in out and "built in" in out
    # The endpoint and an MCP client's entry for it, with the caller's own key.
    assert ENDPOINT in out and '"Authorization": "Bearer <your llmgw key>"' in out
    assert TOKEN_VALUE not in out

    reply = json.loads((await ctl(home, "list", "--json")).stdout)
    assert reply["endpoint"] == ENDPOINT
    assert [s["name"] for s in reply["servers"]] == [ADMIN_SERVER, "hr", "wiki"]


async def test_list_with_no_company_server_says_how_to_add_one(home):
    home, _ = home
    res = await ctl(home, "list")
    assert res.exit_code == 0 and "llmgw ctl mcp add NAME --url URL" in res.stdout


def test_the_client_config_snippet_is_json_with_the_endpoint_and_a_key_placeholder():
    entry = json.loads(client_config(ENDPOINT))["mcpServers"]["llmgw"]
    assert entry["url"] == ENDPOINT
    assert entry["headers"] == {"Authorization": "Bearer <your llmgw key>"}


async def test_show_json_carries_header_names_and_no_values(home, token_file):
    home, _ = home
    await add_hr(home, token_file, "--header", "X-Tenant=acme")
    res = await ctl(home, "show", "hr", "--json")
    assert res.exit_code == 0
    view = json.loads(res.stdout)
    assert view["header_names"] == ["X-Tenant"] and view["sealed_header_names"] == ["Authorization"]
    assert TOKEN_VALUE not in res.stdout
    human = await ctl(home, "show", "hr")
    assert "sealed headers" in human.stdout and "Authorization" in human.stdout
    missing = await ctl(home, "show", "nope")
    assert missing.exit_code == ExitCode.NOT_FOUND and "no MCP server 'nope'" in said(missing)


async def test_test_lists_the_tools_or_says_what_failed_and_exits_non_zero(home, token_file):
    home, service = home
    await add_hr(home, token_file)
    res = await ctl(home, "test", "hr")
    assert res.exit_code == 0, res.output
    assert "hr answered in 3.2 ms" in res.stdout and "lookup, slow" in res.stdout
    assert "2026-07-28" in res.stdout and "llmgw ctl mcp grant" in res.stdout

    service.test_reply = McpTestReply(
        name="hr", ok=False, error="the server answered 401: its credential was refused"
    )
    res = await ctl(home, "test", "hr")
    assert res.exit_code == ExitCode.ERROR
    assert "hr could not be used: the server answered 401" in said(res)
    assert "llmgw ctl mcp change hr" in said(res)
    res = await ctl(home, "test", "hr", "--json")
    assert res.exit_code == ExitCode.ERROR and json.loads(res.stdout)["ok"] is False


async def test_change_sends_only_what_is_given(home, token_file, tmp_path):
    home, service = home
    await add_hr(home, token_file, "--header", "X-Tenant=acme")
    res = await ctl(home, "change", "hr", "--rate", "5", "--disable")
    assert res.exit_code == 0, res.output
    sent = service.puts[-1]
    assert not sent.create and sorted(sent.set) == ["enabled", "rate_per_minute"]
    assert (sent.rate_per_minute, sent.enabled) == (5, False)
    assert "Check it: llmgw ctl mcp test hr" in res.stdout

    new = tmp_path / "new.token"
    new.write_text("rotated-token")
    res = await ctl(home, "change", "hr", "--bearer-file", str(new))
    assert res.exit_code == 0, res.output
    sent = service.puts[-1]
    assert sent.set == ["secret_headers"]
    assert service.sealed["hr"] == {"Authorization": "Bearer rotated-token"}
    assert service.servers["hr"].header_names == ["X-Tenant"]  # the plain header stays

    res = await ctl(home, "change", "hr", "--clear-headers")
    assert sorted(service.puts[-1].set) == ["headers", "secret_headers"]
    assert service.servers["hr"].header_names == [] and service.sealed["hr"] == {}

    n = len(service.puts)
    res = await ctl(home, "change", "hr")
    assert res.exit_code == ExitCode.USAGE and "nothing to change" in said(res)
    res = await ctl(home, "change", "hr", "--description", "x", "--clear-description")
    assert res.exit_code == ExitCode.USAGE
    assert len(service.puts) == n


async def test_remove_asks_first_and_says_what_went(home, token_file):
    home, service = home
    await add_hr(home, token_file)
    await ctl(home, "grant", "Acme/ml", "hr")
    res = await ctl(home, "remove", "hr", input="n\n")
    assert res.exit_code == ExitCode.ERROR and "hr" in service.servers
    assert "Remove hr and its 1 grant(s)?" in res.stderr
    res = await ctl(home, "remove", "hr", input="y\n")
    assert res.exit_code == 0 and "hr" not in service.servers
    assert "Removed hr and 1 grant(s)" in res.stdout
    await add_hr(home, token_file)
    res = await ctl(home, "remove", "hr", "--yes", "--json")
    assert json.loads(res.stdout) == {"name": "hr", "grants_removed": 0}


async def test_grant_and_revoke_say_what_changed_and_what_still_gives_it(home, token_file):
    home, _ = home
    await add_hr(home, token_file)
    res = await ctl(home, "grant", "Acme/ml/search", "hr.lookup")
    assert res.exit_code == 0, res.output
    assert "Granted project:Acme/ml/search → hr.lookup." in res.stdout
    assert "within seconds" in res.stdout
    res = await ctl(home, "grant", "Acme/ml/search", "hr.lookup")
    assert "Already granted" in res.stdout
    res = await ctl(home, "grant", "Acme/ml", "hr", "--json")
    assert json.loads(res.stdout)["grant"] == {
        "scope": "team:Acme/ml",
        "target": "hr",
        "created_at": AT,
    }

    res = await ctl(home, "revoke", "Acme/ml/search", "hr.lookup")
    assert "Revoked project:Acme/ml/search → hr.lookup." in res.stdout
    assert "Still given by: team:Acme/ml (hr)" in res.stdout
    res = await ctl(home, "revoke", "Acme/ml", "hr")
    assert "Revoked team:Acme/ml → hr." in res.stdout and "stop seeing it" in res.stdout

    res = await ctl(home, "grants", "--server", "hr")
    assert "No grants" in res.stdout
    res = await ctl(home, "grant", "Acme/ml", ADMIN_SERVER)
    assert res.exit_code == 0
    listed = await ctl(home, "grants")
    assert "team:Acme/ml" in listed.stdout and ADMIN_SERVER in listed.stdout


async def test_a_grant_to_no_one_or_nothing_is_refused_before_any_call(home):
    home, service = home
    res = await ctl(home, "grant", "Acme/ml/search/extra", "hr")
    assert res.exit_code == ExitCode.USAGE and "neither a key id" in said(res)
    res = await ctl(home, "grant", "Acme", "Hr!")
    assert res.exit_code == ExitCode.USAGE and "not a valid MCP server name" in said(res)
    res = await ctl(home, "grant", "Acme", "nope")
    assert res.exit_code == ExitCode.NOT_FOUND
    assert service.grants == []


async def test_usage_groups_calls_by_server_and_tool_over_the_last_day(home):
    home, service = home
    res = await ctl(home, "usage")
    assert res.exit_code == 0, res.output
    sent = service.usage_requests[-1]
    assert sent.by == ["server", "tool"] and sent.from_ < sent.to
    row = next(line for line in res.stdout.splitlines() if "lookup" in line)
    assert "12" in row and "9.2" in row and "34.0 KB" in row
    res = await ctl(home, "usage", "--by", "key,status", "--server", "hr", "--from", "7d")
    sent = service.usage_requests[-1]
    assert sent.by == ["key", "status"] and sent.server == "hr"
    res = await ctl(home, "usage", "--by", "model")
    assert res.exit_code == ExitCode.USAGE and "group by server, tool" in said(res)
    res = await ctl(home, "usage", "--json")
    assert json.loads(res.stdout)["calls"] == 12
