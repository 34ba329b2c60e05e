"""The fake admin server answering the Mcp* RPCs too, for the MCP screen's tests.

Real grpclib and the real token check (tests/tui/kit/fake_admin.py); the company
servers and grants are dicts here, changed as gatewayd's answers would show
them: llmgw:admin listed first (builtin), a create refused for a name that
exists (ALREADY_EXISTS), a change only of the fields in ``set``, sealed
headers shown as names (the fake keeps the values in ``sealed`` so a test can
check what was sent), a grant or revoke that names nothing refused as
gatewayd refuses it. Every RPC is recorded in ``calls`` as (method, request),
so a test sees which admin method an action called and with what. The same
screen against a real gatewayd: tests/tui/parity/mcp_gateway.py.
"""

from __future__ import annotations

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from llmgw.mcp.names import (
    ADMIN_SERVER,
    McpNameRefused,
    grant_target,
    parse_what,
    parse_who,
)
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
    PutMcpServerRequest,
    RemoveMcpServerReply,
)
from tests.tui.kit.fake_admin import FakeAdminService

ENDPOINT = "http://127.0.0.1:8080/mcp"
AT = "2026-09-01T12:00:00+00:00"
REFUSED_AT_WIKI = "connection refused at http://127.0.0.1:9/sse: is the server running?"
PUT_FIELDS = (
    "url",
    "description",
    "headers",
    "secret_headers",
    "timeout_s",
    "rate_per_minute",
    "enabled",
)


def company(name: str, url: str, **fields) -> McpServerView:
    given = {
        "transport": "sse" if url.endswith("/sse") else "streamable_http",
        "enabled": True,
        "breaker": "closed",
        "state": "unknown",
        "created_at": AT,
        "updated_at": AT,
        **fields,
    }
    return McpServerView(name=name, url=url, **given)


class FakeMcpService(FakeAdminService):
    def __init__(self) -> None:
        super().__init__()
        self.servers: dict[str, McpServerView] = {
            "hr": company(
                "hr",
                "http://127.0.0.1:9101/mcp",
                description="people lookups",
                sealed_header_names=["Authorization"],
                header_names=["X-Team"],
                rate_per_minute=60,
                state="ok",
                tools=["lookup", "slow"],
            ),
            "wiki": company(
                "wiki",
                "http://127.0.0.1:9/sse",
                breaker="open",
                breaker_reason="connection refused",
                state="failing",
            ),
        }
        self.sealed: dict[str, dict[str, str]] = {"hr": {"Authorization": "Bearer s3cret"}}
        self.grants: list[McpGrantView] = [
            McpGrantView(scope="project:Acme/ml/search", target="hr", created_at=AT),
            McpGrantView(scope="team:Acme/ml", target="llmgw:admin.list_nodes", created_at=AT),
        ]
        # Every Mcp* call as it came: (the AdminClient method's name, the request).
        self.calls: list[tuple[str, object]] = []

    def asked(self, method: str) -> list:
        return [m for name, m in self.calls if name == method]

    def _view(self, name: str) -> McpServerView:
        if name == ADMIN_SERVER:
            view = McpServerView(name=ADMIN_SERVER, builtin=True, enabled=True, state="ok")
        else:
            found = self.servers.get(name)
            if found is None:
                raise GRPCError(
                    Status.NOT_FOUND, f"no MCP server {name!r}; add it: llmgw ctl mcp add {name}"
                )
            view = found
        view.grants = [g for g in self.grants if g.target.partition(".")[0] == name]
        return view

    async def list_mcp_servers(self, message: ListMcpServersRequest) -> ListMcpServersReply:
        self.calls.append(("list_mcp_servers", message))
        views = [self._view(ADMIN_SERVER), *(self._view(n) for n in sorted(self.servers))]
        return ListMcpServersReply(servers=views, endpoint=ENDPOINT)

    async def get_mcp_server(self, message: McpServerRequest) -> McpServerView:
        self.calls.append(("get_mcp_server", message))
        return self._view(message.name)

    async def put_mcp_server(self, message: PutMcpServerRequest) -> McpServerView:
        self.calls.append(("put_mcp_server", message))
        if message.create:
            if message.name in self.servers:
                raise GRPCError(
                    Status.ALREADY_EXISTS,
                    f"an MCP server named {message.name!r} exists; change it: llmgw ctl mcp"
                    f" change {message.name}",
                )
            self.servers[message.name] = company(message.name, message.url)
            self.sealed[message.name] = {}
        view = self._view(message.name)
        for f in PUT_FIELDS if message.create else message.set:
            if f == "headers":
                view.header_names = sorted(message.headers)
            elif f == "secret_headers":
                view.sealed_header_names = sorted(message.secret_headers)
                self.sealed[message.name] = dict(message.secret_headers)
            else:
                setattr(view, f, getattr(message, f))
        view.transport = "sse" if view.url.endswith("/sse") else "streamable_http"
        view.state = (
            "off" if not view.enabled else ("unknown" if view.state == "off" else view.state)
        )
        return view

    async def remove_mcp_server(self, message: McpServerRequest) -> RemoveMcpServerReply:
        self.calls.append(("remove_mcp_server", message))
        view = self._view(message.name)
        del self.servers[message.name]
        self.sealed.pop(message.name, None)
        self.grants = [g for g in self.grants if g not in view.grants]
        return RemoveMcpServerReply(name=message.name, grants_removed=len(view.grants))

    async def test_mcp_server(self, message: McpServerRequest) -> McpTestReply:
        self.calls.append(("test_mcp_server", message))
        view = self._view(message.name)
        if view.state == "failing":
            return McpTestReply(name=view.name, ok=False, error=REFUSED_AT_WIKI)
        view.tools = view.tools or ["search"]
        return McpTestReply(
            name=view.name,
            ok=True,
            tools=list(view.tools),
            protocol_version="2026-07-28",
            latency_ms=3.25,
        )

    def _grant(self, message: McpGrantRequest) -> McpGrantView:
        try:
            scope = parse_who(message.who).scope
            server, tool = parse_what(message.what)
        except McpNameRefused as e:
            raise GRPCError(Status.INVALID_ARGUMENT, str(e)) from None
        self._view(server)
        return McpGrantView(scope=scope, target=grant_target(server, tool), created_at=AT)

    async def grant_mcp(self, message: McpGrantRequest) -> McpGrantReply:
        self.calls.append(("grant_mcp", message))
        g = self._grant(message)
        there = any((x.scope, x.target) == (g.scope, g.target) for x in self.grants)
        if not there:
            self.grants.append(g)
        return McpGrantReply(grant=g, changed=not there)

    async def revoke_mcp(self, message: McpGrantRequest) -> McpGrantReply:
        self.calls.append(("revoke_mcp", message))
        g = self._grant(message)
        kept = [x for x in self.grants if (x.scope, x.target) != (g.scope, g.target)]
        changed, self.grants = len(kept) != len(self.grants), kept
        # The levels above the one revoked that still grant the same server.
        server = g.target.partition(".")[0]
        still = [
            f"{x.scope} → {x.target}"
            for x in self.grants
            if x.target.partition(".")[0] == server
            and g.scope.partition(":")[2].startswith(x.scope.partition(":")[2] + "/")
        ]
        return McpGrantReply(grant=g, changed=changed, still_granted_by=still)

    async def list_mcp_grants(self, message: ListMcpGrantsRequest) -> ListMcpGrantsReply:
        self.calls.append(("list_mcp_grants", message))
        shown = sorted(self.grants, key=lambda g: (g.scope, g.target))
        return ListMcpGrantsReply(grants=shown)
