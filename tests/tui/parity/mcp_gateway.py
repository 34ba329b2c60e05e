"""The MCP screen and its actions against a live gatewayd and real MCP servers, for test_parity.

``McpServers`` serves two company MCP servers written with the official SDK on
loopback (tests/fakes/mcp_servers.py): hr, streamable HTTP needing a bearer
token, and wiki, over SSE. The fixture adds hr (and a few servers of its own
for the actions that change or remove one) through gatewayd as ``ctl mcp add``
would, and grants hr to the search project. The screen is compared with
``ctl mcp list`` and ``ctl mcp grants``; each action is performed through the
pilot and read back with the command that shows it: Add adds wiki through the
dialog and ``mcp list`` has it, Test answers with the tools ``mcp test``
names, Replace credential seals a token hr takes (``mcp test`` passes after),
and so on. ``SCREENS`` and ``ACTIONS`` are in the shape of ``kit``'s.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Self

from textual.widgets import Input

from proto.llmgw.v1 import ListMcpGrantsReply, ListMcpServersReply, McpTestReply
from proto.llmgw.v1 import PutMcpServerRequest as Put
from tests.fakes.mcp_servers import CompanyServer, hr_server, serve, wiki_server
from tests.tui.parity.kit import (
    SEARCH,
    Live,
    Step,
    agree,
    cells,
    cursor_to,
    press,
    screen_is,
    static_text,
    table_rows,
    to_mode,
    until,
)
from tui.parity import Item
from tui.screens.mcp.cells import grant_cells, grant_key, server_cells

HR_TOKEN = "parity-hr-token"
# Added through the dialog; the fixture's own for Change, Turn off/on and Remove.
ADDED = "wiki"
CHANGED = "hr-change"
TURNED = "hr-turn"
REMOVED = "hr-rm"
# The grant the fixture gives (shown on the screen) and the one Revoke takes back.
GIVEN = ("project:" + SEARCH, "hr")
TO_REVOKE = ("org:Acme", "hr.slow")


@dataclass
class McpServers:
    """hr (streamable HTTP, bearer token) and wiki (SSE), served in this process."""

    hr: CompanyServer = field(default_factory=lambda: hr_server(HR_TOKEN))
    wiki: CompanyServer = field(default_factory=wiki_server)
    hr_url: str = ""
    wiki_url: str = ""
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def __aenter__(self) -> Self:
        try:
            self.hr_url = await self._stack.enter_async_context(serve(self.hr))
            self.wiki_url = await self._stack.enter_async_context(serve(self.wiki))
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        await self._stack.aclose()

    async def fill(self, admin) -> None:
        """What the screen starts with, added through gatewayd as `ctl mcp add` would.
        The search project's levels exist already (grants name existing levels only)."""
        bearer = {"Authorization": f"Bearer {HR_TOKEN}"}
        for name in ("hr", CHANGED, TURNED, REMOVED):
            await admin.put_mcp_server(
                Put(
                    name=name,
                    create=True,
                    set=["url", "secret_headers", "enabled"],
                    url=self.hr_url,
                    secret_headers=bearer,
                    enabled=True,
                )
            )
        for scope, target in (GIVEN, TO_REVOKE):
            await admin.grant_mcp(scope.partition(":")[2], target)


# -- the screen ------------------------------------------------------------------------------


async def to_mcp(app, pilot, live: Live) -> None:
    await to_mode(pilot, "mcp")


async def _servers_said(live: Live, item: Item, *, shown_by: bool = False) -> dict:
    raw = await (live.shown_by(item) if shown_by else live.said(item, 0))
    reply = ListMcpServersReply.from_dict(raw)
    return {v.name: cells(server_cells(v)) for v in reply.servers}


async def _grants_said(live: Live, item: Item, *, shown_by: bool = False) -> dict:
    raw = await (live.shown_by(item) if shown_by else live.said(item, 1))
    reply = ListMcpGrantsReply.from_dict(raw)
    return {grant_key(g): cells(grant_cells(g)) for g in reply.grants}


async def check_mcp(app, pilot, live: Live) -> None:
    item = ("McpScreen", None)
    reload = app.screen.reload
    shown = await agree(
        pilot,
        lambda: table_rows(app, "#mcp-servers"),
        lambda: _servers_said(live, item),
        again=reload,
    )
    assert next(iter(shown)) == "llmgw:admin" and "hr" in shown
    # Header names, never values: the token is nowhere on the screen.
    assert "Authorization (sealed)" in shown["hr"]
    assert HR_TOKEN not in app.export_screenshot()
    grants = await agree(
        pilot,
        lambda: table_rows(app, "#mcp-grants"),
        lambda: _grants_said(live, item),
        again=reload,
    )
    assert " ".join(GIVEN) in grants
    endpoint = ListMcpServersReply.from_dict(await live.said(item, 0)).endpoint
    assert endpoint.endswith("/mcp") and endpoint in static_text(app, "#mcp-agents")


async def _agree_servers(app, pilot, live: Live, item: Item) -> dict:
    return await agree(
        pilot,
        lambda: table_rows(app, "#mcp-servers"),
        lambda: _servers_said(live, item, shown_by=True),
        again=app.screen.reload,
    )


async def _agree_grants(app, pilot, live: Live, item: Item) -> dict:
    return await agree(
        pilot,
        lambda: table_rows(app, "#mcp-grants"),
        lambda: _grants_said(live, item, shown_by=True),
        again=app.screen.reload,
    )


def _said(app) -> str:
    return " ".join(static_text(app, "#action-line").split())


async def _ok(pilot, app) -> None:
    await pilot.click("#form-ok")
    await until(pilot, lambda: screen_is(app, "McpScreen"))


async def do_add(app, pilot, live: Live) -> None:
    item = ("McpScreen", "add")
    mcps: McpServers = live.mcp
    await to_mcp(app, pilot, live)
    await press(pilot, *item, "McpServerDialog")
    app.screen.query_one("#mcp-name", Input).value = ADDED
    app.screen.query_one("#mcp-url", Input).value = mcps.wiki_url
    app.screen.query_one("#mcp-rate", Input).value = "30"
    await _ok(pilot, app)
    await until(pilot, lambda: f"Added {ADDED}" in _said(app))
    shown = await _agree_servers(app, pilot, live, item)
    assert "30/min" in shown[ADDED] and "(SSE)" in " ".join(shown[ADDED])


async def do_test(app, pilot, live: Live) -> None:
    item = ("McpScreen", "test")
    await to_mcp(app, pilot, live)
    await cursor_to(pilot, "#mcp-servers", "hr")
    await pilot.press("t")
    await until(pilot, lambda: "tool(s)" in _said(app) or "failed" in _said(app), tries=400)
    reply = McpTestReply.from_dict(await live.said(item, name="hr"))
    assert reply.ok, reply.error
    assert f"{len(reply.tools)} tool(s): {', '.join(reply.tools)}" in _said(app)


async def do_grant(app, pilot, live: Live) -> None:
    item = ("McpScreen", "grant")
    await to_mcp(app, pilot, live)
    await cursor_to(pilot, "#mcp-servers", "hr")
    await press(pilot, *item, "GrantDialog")
    app.screen.query_one("#grant-who", Input).value = "Acme/ml"
    app.screen.query_one("#grant-what", Input).value = "hr.lookup"
    await _ok(pilot, app)
    await until(pilot, lambda: "Granted hr.lookup" in _said(app))
    grants = await _agree_grants(app, pilot, live, item)
    assert "team:Acme/ml hr.lookup" in grants


async def do_revoke(app, pilot, live: Live) -> None:
    item = ("McpScreen", "revoke")
    await to_mcp(app, pilot, live)
    await cursor_to(pilot, "#mcp-grants", " ".join(TO_REVOKE))
    await press(pilot, *item, "GrantDialog")
    assert app.screen.query_one("#grant-who", Input).value == "Acme"
    await _ok(pilot, app)
    await until(pilot, lambda: "Revoked hr.slow" in _said(app))
    grants = await _agree_grants(app, pilot, live, item)
    assert " ".join(TO_REVOKE) not in grants


async def do_change(app, pilot, live: Live) -> None:
    item = ("McpScreen", "change")
    await to_mcp(app, pilot, live)
    await cursor_to(pilot, "#mcp-servers", CHANGED)
    await press(pilot, *item, "McpServerDialog")
    app.screen.query_one("#mcp-timeout", Input).value = "7"
    await _ok(pilot, app)
    await until(pilot, lambda: f"Changed {CHANGED}" in _said(app))
    shown = await _agree_servers(app, pilot, live, item)
    assert "7 s" in shown[CHANGED]


async def do_credential(app, pilot, live: Live) -> None:
    item = ("McpScreen", "credential")
    await to_mcp(app, pilot, live)
    await cursor_to(pilot, "#mcp-servers", "hr")
    await press(pilot, *item, "CredentialDialog")
    app.screen.query_one("#cred-secret", Input).value = HR_TOKEN
    await _ok(pilot, app)
    await until(pilot, lambda: "Replaced the credential of hr" in _said(app))
    shown = await _agree_servers(app, pilot, live, item)
    assert "Authorization (sealed)" in shown["hr"]
    # The token sealed through the screen is the one hr takes.
    tested = McpTestReply.from_dict(await live.ctl(("ctl", "mcp", "test", "hr")))
    assert tested.ok, tested.error


async def _turn(app, pilot, live: Live, action: str, *, off: bool) -> None:
    item = ("McpScreen", action)
    await to_mcp(app, pilot, live)
    await cursor_to(pilot, "#mcp-servers", TURNED)
    await until(pilot, lambda: app.screen.check_action(action, ()) is True)
    await pilot.press("f")
    await until(pilot, lambda: (table_rows(app, "#mcp-servers")[TURNED][1] == "off") == off)
    shown = await _agree_servers(app, pilot, live, item)
    assert (shown[TURNED][1] == "off") == off


async def do_turn_off(app, pilot, live: Live) -> None:
    await _turn(app, pilot, live, "turn_off", off=True)


async def do_turn_on(app, pilot, live: Live) -> None:
    # On its own too: it is off first whichever ran before.
    off = Put(name=TURNED, create=False, set=["enabled"], enabled=False)
    await live.client.put_mcp_server(off)
    app.screen.reload()
    await _turn(app, pilot, live, "turn_on", off=False)


async def do_remove(app, pilot, live: Live) -> None:
    item = ("McpScreen", "remove")
    await to_mcp(app, pilot, live)
    await cursor_to(pilot, "#mcp-servers", REMOVED)
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: screen_is(app, "McpScreen"))
    await until(pilot, lambda: f"Removed {REMOVED}" in _said(app))
    shown = await _agree_servers(app, pilot, live, item)
    assert REMOVED not in shown


SCREENS: dict[str, tuple[Step, Step | None]] = {
    "McpScreen": (to_mcp, check_mcp),
}
ACTIONS: dict[Item, Step] = {
    ("McpScreen", "add"): do_add,
    ("McpScreen", "test"): do_test,
    ("McpScreen", "grant"): do_grant,
    ("McpScreen", "revoke"): do_revoke,
    ("McpScreen", "change"): do_change,
    ("McpScreen", "credential"): do_credential,
    ("McpScreen", "turn_off"): do_turn_off,
    ("McpScreen", "turn_on"): do_turn_on,
    ("McpScreen", "remove"): do_remove,
}
