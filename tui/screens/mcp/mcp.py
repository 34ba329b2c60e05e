"""The MCP screen: the gateway's company MCP servers, who may call their tools, and how.

It shows what ``llmgw ctl mcp list`` prints (each server, llmgw:admin first,
with its state, breaker, rate, header names — never values —, address and the
tools last seen) and ``llmgw ctl mcp grants`` (who → what), and a panel saying
how an agent is pointed at the gateway's ``/mcp`` with its own key. Each key
makes the call its command makes, through the same ``AdminClient`` method:
``a`` Add (``mcp add``), ``t`` Test (``mcp test``: the tools, or what failed
in words), ``g`` Grant and ``x`` Revoke (``mcp grant|revoke WHO WHAT``), ``e``
Change and ``s`` Replace the credential (``mcp change``), ``f`` Turn off or on
(``mcp change --disable|--enable``), ``d`` Remove after asking (``mcp remove``).

Breakers open and close on their own, so the screen reads again every
``REFRESH_S`` while shown, when shown again, after each change and on r.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.mcpfmt import dropped_text
from proto.llmgw.v1 import (
    ListMcpGrantsReply,
    ListMcpServersReply,
    McpGrantReply,
    McpGrantView,
    McpServerView,
    McpTestReply,
    PutMcpServerRequest,
    RemoveMcpServerReply,
)
from tui.screens.common import AdminFailed, Answered, Refused, describe, show_worker_error
from tui.screens.dialogs import Confirm
from tui.screens.live import LiveRows, Rereads, selected_key, show_text
from tui.screens.mcp.cells import (
    GRANT_COLUMNS,
    NO_GRANTS,
    NO_SERVERS,
    SERVER_COLUMNS,
    agent_help,
    details_text,
    grant_cells,
    grant_key,
    keys_of,
    server_cells,
    who_of,
)
from tui.screens.mcp.forms import CredentialDialog, GrantAsk, GrantDialog, McpServerDialog
from tui.screens.shell import KeyFooter, ShellHeader

# 5 s: a breaker that opened shows within this while one watches.
REFRESH_S = 5.0
# The actions that need a company server selected (llmgw:admin is not theirs to change).
ON_A_SERVER = ("test", "change", "credential", "remove")


@dataclass
class McpRead:
    """One read of the screen: ``ctl mcp list`` and ``ctl mcp grants``."""

    servers: ListMcpServersReply
    grants: ListMcpGrantsReply


class McpRefused(Refused):
    """gatewayd refused what the screen asked (``action``), or could not be asked."""

    def __init__(self, action: str, error: LlmgwError) -> None:
        super().__init__(error)
        self.action = action


class McpScreen(Rereads, Screen[None]):
    """Company MCP servers and llmgw:admin, the grants, and how agents reach /mcp."""

    DEFAULT_CSS = """
    #mcp-servers { height: auto; max-height: 50%; min-height: 3; }
    #mcp-grants { height: auto; max-height: 40%; min-height: 3; }
    #mcp-details, #mcp-grants-title, #mcp-grants-empty { height: auto; padding: 0 1; }
    #mcp-grants-title { margin-top: 1; text-style: bold; }
    #mcp-agents {
        dock: bottom; height: auto; margin-bottom: 1; padding: 0 1;
        border-top: solid $panel-lighten-2; color: $text-muted;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "add", "Add"),
        Binding("t", "test", "Test"),
        Binding("g", "grant", "Grant"),
        Binding("x", "revoke", "Revoke"),
        Binding("e", "change", "Change"),
        Binding("s", "credential", "Credential"),
        Binding("f", "turn_off", "Turn off"),
        Binding("f", "turn_on", "Turn on"),
        Binding("d,delete", "remove", "Remove"),
    ]

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._servers: LiveRows[McpServerView] = LiveRows(keys_of(SERVER_COLUMNS), server_cells)
        self._grants: LiveRows[McpGrantView] = LiveRows(keys_of(GRANT_COLUMNS), grant_cells)
        self._read: McpRead | None = None
        # The server to put the cursor on once the next read arrives (after an add).
        self._want: str | None = None

    def compose(self) -> ComposeResult:
        yield ShellHeader("mcp")
        yield Static(f"Reading the MCP servers through {self._client.address}…", id="status")
        yield Static(id="action-line")
        yield self._table("mcp-servers", SERVER_COLUMNS)
        yield Static(id="mcp-details")
        yield Static(
            "Grants: none by default; a level's reaches everything beneath it",
            id="mcp-grants-title",
        )
        yield self._table("mcp-grants", GRANT_COLUMNS)
        yield Static(NO_GRANTS, id="mcp-grants-empty")
        yield Static(agent_help(""), id="mcp-agents")
        yield KeyFooter()

    @staticmethod
    def _table(name: str, columns: tuple[str, ...]) -> DataTable:
        table: DataTable = DataTable(id=name, cursor_type="row", zebra_stripes=True)
        for heading, key in zip(columns, keys_of(columns), strict=True):
            table.add_column(heading, key=key)
        return table

    def on_mount(self) -> None:
        for name in ("action-line", "mcp-grants-empty"):
            self.query_one(f"#{name}").display = False
        self.query_one("#mcp-servers", DataTable).focus()
        self.reread_every(REFRESH_S)

    # -- what is selected ----------------------------------------------------------------

    def selected_server(self) -> McpServerView | None:
        table = next(self.query("#mcp-servers").results(DataTable), None)
        key = None if table is None else selected_key(table)
        return None if key is None else self._servers.views.get(key)

    def selected_grant(self) -> McpGrantView | None:
        table = next(self.query("#mcp-grants").results(DataTable), None)
        key = None if table is None else selected_key(table)
        return None if key is None else self._grants.views.get(key)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        server = self.selected_server()
        company = server is not None and not server.builtin
        if action in ON_A_SERVER:
            return True if company else None
        if action == "turn_off":
            # One f in the footer: Turn off, or Turn on for a server that is off.
            if server is not None and company and not server.enabled:
                return False
            return True if company else None
        if action == "turn_on":
            return bool(company and server is not None and not server.enabled)
        return True

    # -- actions: a dialog, then a worker ------------------------------------------------

    def action_add(self) -> None:
        def send(request: PutMcpServerRequest | None) -> None:
            if request is not None:
                self._want = request.name
                self.run_call("add", lambda c: c.put_mcp_server(request))

        self.app.push_screen(McpServerDialog(), send)

    def action_change(self) -> None:
        server = self.selected_server()
        if server is None or server.builtin:
            return

        def send(request: PutMcpServerRequest | None) -> None:
            if request is not None:
                self.run_call("change", lambda c: c.put_mcp_server(request))

        self.app.push_screen(McpServerDialog(server), send)

    def action_credential(self) -> None:
        server = self.selected_server()
        if server is None or server.builtin:
            return

        def send(request: PutMcpServerRequest | None) -> None:
            if request is not None:
                self.run_call("credential", lambda c: c.put_mcp_server(request))

        self.app.push_screen(CredentialDialog(server), send)

    def _turn(self, action: str, enabled: bool) -> None:
        server = self.selected_server()
        if server is None or server.builtin:
            return
        request = PutMcpServerRequest(
            name=server.name, create=False, set=["enabled"], enabled=enabled
        )
        self.run_call(action, lambda c: c.put_mcp_server(request))

    def action_turn_off(self) -> None:
        self._turn("turn_off", False)

    def action_turn_on(self) -> None:
        self._turn("turn_on", True)

    def action_test(self) -> None:
        server = self.selected_server()
        if server is None or server.builtin:
            return
        self._say(f"Testing {server.name} at {server.url}…", error=False)
        self.run_call("test", lambda c: c.test_mcp_server(server.name))

    def action_grant(self) -> None:
        server = self.selected_server()

        def send(ask: GrantAsk | None) -> None:
            if ask is not None:
                self.run_call("grant", lambda c: c.grant_mcp(ask.who, ask.what))

        what = server.name if server is not None else ""
        self.app.push_screen(GrantDialog(grant=True, what=what), send)

    def action_revoke(self) -> None:
        grant = self.selected_grant()

        def send(ask: GrantAsk | None) -> None:
            if ask is not None:
                self.run_call("revoke", lambda c: c.revoke_mcp(ask.who, ask.what))

        who, what = (who_of(grant.scope), grant.target) if grant is not None else ("", "")
        self.app.push_screen(GrantDialog(grant=False, who=who, what=what), send)

    def action_remove(self) -> None:
        server = self.selected_server()
        if server is None or server.builtin:
            return

        def remove(yes: bool | None) -> None:
            if yes:
                self.run_call("remove", lambda c: c.remove_mcp_server(server.name))

        question = (
            f"Remove the MCP server {server.name} ({server.url})? Its {len(server.grants)}"
            " grant(s) and its sealed credential go with it; agents lose its tools at once."
        )
        self.app.push_screen(Confirm(f"Remove {server.name}", question, "Remove"), remove)

    # -- workers: the only code here that talks to gatewayd ------------------------------

    @work(exclusive=True, exit_on_error=False, group="mcp-load")
    async def load(self) -> None:
        try:
            read = McpRead(
                await self._client.list_mcp_servers(), await self._client.list_mcp_grants()
            )
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(Answered("load", read))

    @work(exit_on_error=False, group="mcp-action")
    async def run_call(self, action: str, call: Callable[[AdminClient], Awaitable[Any]]) -> None:
        try:
            reply = await call(self._client)
        except LlmgwError as e:
            self.post_message(McpRefused(action, e))
            return
        self.post_message(Answered(action, reply))

    # -- message handlers: widgets only --------------------------------------------------

    def on_answered(self, message: Answered) -> None:
        if message.action == "load":
            self._loaded(message.reply)  # type: ignore[arg-type]
            return
        text, error = said(message.action, message.reply)
        self._say(text, error=error)
        self.load()

    def on_mcp_refused(self, message: McpRefused) -> None:
        self._say(describe(message.error), error=True)
        self.load()

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_details()
        self.refresh_bindings()

    # -- the widgets ---------------------------------------------------------------------

    def _loaded(self, read: McpRead) -> None:
        self._read = read
        servers = self.query_one("#mcp-servers", DataTable)
        self._fill(self._servers, servers, [(v.name, v) for v in read.servers.servers])
        if self._want is not None and self._want in self._servers.views:
            servers.move_cursor(row=servers.get_row_index(self._want))
        self._want = None
        grants = self.query_one("#mcp-grants", DataTable)
        self._fill(self._grants, grants, [(grant_key(g), g) for g in read.grants.grants])
        company = [v for v in read.servers.servers if not v.builtin]
        failing = sum(1 for v in company if v.state == "failing")
        status = self.query_one("#status", Static)
        if company:
            text = (
                f"MCP servers: {len(company)} ({failing} failing) · grants:"
                f" {len(read.grants.grants)} · every {REFRESH_S:g} s · r reads again"
            )
        else:
            text = NO_SERVERS
        show_text(status, text)
        status.set_class(False, "-error")
        grants.display = bool(read.grants.grants)
        self.query_one("#mcp-grants-empty").display = not read.grants.grants
        show_text(self.query_one("#mcp-agents", Static), agent_help(read.servers.endpoint))
        self._show_details()
        self.refresh_bindings()

    @staticmethod
    def _fill(rows: LiveRows, table: DataTable, views: list) -> None:
        if [k for k, _ in views] != list(rows.views):
            rows.load(table, views)
        else:
            for key, view in views:
                rows.put(key, view)
            rows.flush(table)

    def _show_details(self) -> None:
        server = self.selected_server()
        details = self.query_one("#mcp-details", Static)
        details.display = server is not None
        if server is not None:
            show_text(details, details_text(server))

    def _say(self, text: str, *, error: bool) -> None:
        """What the last action did, or why it was refused, until the next."""
        line = self.query_one("#action-line", Static)
        line.update(text)
        line.set_class(error, "-error")
        line.display = True


def said(action: str, reply: object) -> tuple[str, bool]:
    """What an answered action did, in words (and whether it is bad news)."""
    if isinstance(reply, McpTestReply):
        if not reply.ok:
            return f"{reply.name} failed the test: {reply.error}", True
        tools = ", ".join(reply.tools) or "no tools"
        text = (
            f"{reply.name} answered in {reply.latency_ms:.1f} ms ({reply.protocol_version}):"
            f" {len(reply.tools)} tool(s): {tools}. Grant it: g."
        )
        return text, False
    if isinstance(reply, McpGrantReply):
        g = reply.grant
        who, what = (who_of(g.scope), g.target) if g is not None else ("it", "the tools")
        if action == "grant":
            if not reply.changed:
                return f"{who} had {what} granted already.", False
            return f"Granted {what} to {who}: its keys see it within seconds.", False
        text = f"Revoked {what} from {who}." if reply.changed else f"{who} had no grant of {what}."
        if reply.still_granted_by:
            text += f" It still has it through: {'; '.join(reply.still_granted_by)}."
        return text, False
    if isinstance(reply, RemoveMcpServerReply):
        return f"Removed {reply.name} and its {reply.grants_removed} grant(s).", False
    if isinstance(reply, McpServerView):
        name = reply.name
        words = {
            "add": f"Added {name} ({reply.transport.replace('_', ' ')}). Check it: t;"
            " then grant it: g.",
            "change": f"Changed {name}; new calls use what it says now.",
            "credential": f"Replaced the credential of {name}: new connections use it.",
            "turn_off": f"{name} is off: its tools are hidden and refused.",
            "turn_on": f"{name} is on again: granted keys see its tools.",
        }
        text = words.get(action, f"{name}: done.")
        if reply.sealed_headers_dropped:
            return f"{text} {dropped_text(reply)}", True
        return text, False
    return f"{action}: done.", False
