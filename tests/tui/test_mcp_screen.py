"""The MCP screen against a real admin server over gRPC, driven by Textual's pilot.

The server answers the Mcp* RPCs from dicts (tests/tui/kit/fake_mcp.py) and records
every call, so each test sees which admin method an action called and with
what; the last test runs the ``llmgw ctl mcp`` command of each action against
the same server and holds the two to the same calls. The same screen against
a real gatewayd: tests/tui/parity/mcp_gateway.py.
"""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Checkbox, DataTable, Input, TextArea
from typer.testing import CliRunner

from llmgw.cli.main import app as llmgw_cli
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from proto.llmgw.v1 import McpGrantRequest, McpServerRequest, PutMcpServerRequest
from tests.tui.kit.fake_admin import TOKEN, FakeAdminServer
from tests.tui.kit.fake_mcp import ENDPOINT, REFUSED_AT_WIKI, FakeMcpService, company
from tests.tui.kit.pilot import text, wait_until
from tui.app import LlmgwApp
from tui.screens.dialogs import Confirm
from tui.screens.mcp.cells import grant_cells, grant_key, server_cells
from tui.screens.mcp.forms import CredentialDialog, GrantDialog, McpServerDialog, parse_headers
from tui.screens.mcp.mcp import McpScreen
from tui.screens.shell import tabs_markup, tabs_width, tight_tabs

SIZE = (160, 48)
TOKEN_TYPED = "tok-9f8e7d6c5b4a"


@pytest.fixture
async def server():
    async with FakeAdminServer(service=FakeMcpService()) as srv:
        yield srv


def rows(app: LlmgwApp, selector: str) -> dict[str, list[str]]:
    t = app.screen.query_one(selector, DataTable)
    return {str(key.value): [str(c) for c in t.get_row(key)] for key in t.rows}


def cells(view_cells) -> list[str]:
    return [str(c) for c in view_cells]


def screen_text(app: LlmgwApp) -> str:
    return app.export_screenshot()


async def opened(pilot, app: LlmgwApp) -> None:
    await wait_until(pilot, lambda: len(rows(app, "#mcp-servers")) == 3)


async def select(pilot, app: LlmgwApp, table: str, key: str) -> None:
    t = app.screen.query_one(table, DataTable)
    t.focus()
    t.move_cursor(row=t.get_row_index(key))
    await pilot.pause()


async def press_for(pilot, app: LlmgwApp, key: str, dialog: type) -> None:
    await pilot.press(key)
    await wait_until(pilot, lambda: isinstance(app.screen, dialog))


async def submit(pilot) -> None:
    """OK, as a second try after a refusal too: a button ignores presses while it still
    shows the last one (its ``-active`` look)."""
    button = pilot.app.screen.query_one("#form-ok")
    await wait_until(pilot, lambda: not button.has_class("-active"))
    await pilot.click("#form-ok")


async def ok(pilot, app: LlmgwApp) -> None:
    await submit(pilot)
    await wait_until(pilot, lambda: isinstance(app.screen, McpScreen))


def said(app: LlmgwApp) -> str:
    return " ".join(text(app, "#action-line").split())


async def test_the_screen_shows_servers_grants_and_how_agents_connect_as_ctl_draws_them(server):
    service: FakeMcpService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            assert isinstance(app.screen, McpScreen)
            await opened(pilot, app)
            shown = rows(app, "#mcp-servers")
            # llmgw:admin first, as ctl mcp list has it; every row drawn with its cells.
            assert list(shown) == ["llmgw:admin", "hr", "wiki"]
            for name, view in service.servers.items():
                assert shown[name] == cells(server_cells(view))
            assert "Authorization (sealed)" in " ".join(shown["hr"])
            assert "open: connection refused" in shown["wiki"]
            assert rows(app, "#mcp-grants") == {
                grant_key(g): cells(grant_cells(g)) for g in service.grants
            }
            panel = text(app, "#mcp-agents")
            assert ENDPOINT in panel and "Authorization" in panel and "Bearer" in panel
            status = text(app, "#status")
            assert "MCP servers: 2 (1 failing)" in status and "grants: 2" in status
            # Header values never reach the console: the fake holds one, the screen not.
            assert "s3cret" not in screen_text(app)


async def test_add_sends_the_form_as_ctl_mcp_add_does_and_the_token_is_never_shown(server):
    service: FakeMcpService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await press_for(pilot, app, "a", McpServerDialog)
            dialog = app.screen
            dialog.query_one("#mcp-name", Input).value = "jira"
            dialog.query_one("#mcp-url", Input).value = "http://127.0.0.1:9200/mcp"
            dialog.query_one("#mcp-description", Input).value = "tickets"
            dialog.query_one("#mcp-headers", TextArea).text = "X-Team=ml\nX-Region: eu"
            dialog.query_one("#mcp-secret", Input).value = TOKEN_TYPED
            dialog.query_one("#mcp-rate", Input).value = "30"
            dialog.query_one("#mcp-timeout", Input).value = "12.5"
            assert TOKEN_TYPED not in screen_text(app)  # a password field
            await ok(pilot, app)
            await wait_until(pilot, lambda: "jira" in rows(app, "#mcp-servers"))
            sent = service.asked("put_mcp_server")[-1]
            assert sent.create and sent.name == "jira"
            assert sent.headers == {"X-Team": "ml", "X-Region": "eu"}
            assert sent.secret_headers == {"Authorization": f"Bearer {TOKEN_TYPED}"}
            assert (sent.rate_per_minute, sent.timeout_s, sent.enabled) == (30, 12.5, True)
            row = " ".join(rows(app, "#mcp-servers")["jira"])
            assert "Authorization (sealed)" in row and "30/min" in row
            assert "Added jira" in said(app)
            # The cursor is on the new server: Test acts on it next.
            assert app.screen.selected_server().name == "jira"
            assert TOKEN_TYPED not in screen_text(app)


async def test_a_header_of_its_own_is_sealed_under_its_name(server):
    service: FakeMcpService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await press_for(pilot, app, "a", McpServerDialog)
            dialog = app.screen
            dialog.query_one("#mcp-name", Input).value = "search"
            dialog.query_one("#mcp-url", Input).value = "http://127.0.0.1:9300/sse"
            dialog.query_one("#mcp-header", Input).value = "X-Api-Key"
            dialog.query_one("#mcp-secret", Input).value = TOKEN_TYPED
            dialog.query_one("#mcp-off", Checkbox).value = True
            await ok(pilot, app)
            await wait_until(pilot, lambda: "search" in rows(app, "#mcp-servers"))
            sent = service.asked("put_mcp_server")[-1]
            assert sent.secret_headers == {"X-Api-Key": TOKEN_TYPED} and not sent.enabled
            assert rows(app, "#mcp-servers")["search"][1] == "off"


async def test_a_mistake_in_the_add_form_stays_in_it_in_the_gateways_words(server):
    # Guards: an address carrying user:password@ reaching gatewayd (and its logs) at all.
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await press_for(pilot, app, "a", McpServerDialog)
            app.screen.query_one("#mcp-name", Input).value = "jira"
            app.screen.query_one("#mcp-url", Input).value = "http://bob:pw@10.0.0.9/mcp"
            await submit(pilot)
            await wait_until(pilot, lambda: "user or password" in text(app, "#form-status"))
            app.screen.query_one("#mcp-url", Input).value = "http://10.0.0.9/mcp"
            app.screen.query_one("#mcp-headers", TextArea).text = "no equals sign"
            await submit(pilot)
            await wait_until(pilot, lambda: "NAME=VALUE" in text(app, "#form-status"))
            assert isinstance(app.screen, McpServerDialog)
            assert not server.service.asked("put_mcp_server")


async def test_a_refusal_is_said_on_the_action_line_in_gatewayds_words(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await press_for(pilot, app, "a", McpServerDialog)
            app.screen.query_one("#mcp-name", Input).value = "hr"
            app.screen.query_one("#mcp-url", Input).value = "http://10.0.0.9/mcp"
            await ok(pilot, app)
            await wait_until(pilot, lambda: "exists" in said(app))
            assert "llmgw ctl mcp change hr" in said(app)
            assert app.screen.query_one("#action-line").has_class("-error")


async def test_test_shows_the_tools_or_what_failed_in_words(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await select(pilot, app, "#mcp-servers", "hr")
            await pilot.press("t")
            await wait_until(pilot, lambda: "tool(s)" in said(app))
            assert "2 tool(s): lookup, slow" in said(app) and "2026-07-28" in said(app)
            assert not app.screen.query_one("#action-line").has_class("-error")
            await select(pilot, app, "#mcp-servers", "wiki")
            await pilot.press("t")
            await wait_until(pilot, lambda: "failed the test" in said(app))
            assert REFUSED_AT_WIKI in said(app)
            assert app.screen.query_one("#action-line").has_class("-error")
            assert [m.name for m in server.service.asked("test_mcp_server")] == ["hr", "wiki"]


async def test_grant_and_revoke_send_who_and_what_and_say_what_still_grants_it(server):
    service: FakeMcpService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await select(pilot, app, "#mcp-servers", "hr")
            await press_for(pilot, app, "g", GrantDialog)
            # The selected server is what to grant, already.
            assert app.screen.query_one("#grant-what", Input).value == "hr"
            app.screen.query_one("#grant-who", Input).value = "Acme"
            await ok(pilot, app)
            await wait_until(pilot, lambda: "org:Acme hr" in rows(app, "#mcp-grants"))
            assert service.asked("grant_mcp")[-1] == McpGrantRequest(who="Acme", what="hr")
            assert "Granted hr to Acme" in said(app)
            # Revoke the project's grant: the org's still gives it.
            await select(pilot, app, "#mcp-grants", "project:Acme/ml/search hr")
            await press_for(pilot, app, "x", GrantDialog)
            assert app.screen.query_one("#grant-who", Input).value == "Acme/ml/search"
            await ok(pilot, app)
            await wait_until(pilot, lambda: "Revoked hr" in said(app))
            assert service.asked("revoke_mcp")[-1] == McpGrantRequest(
                who="Acme/ml/search", what="hr"
            )
            assert "still has it through: org:Acme → hr" in said(app)
            await wait_until(pilot, lambda: len(rows(app, "#mcp-grants")) == 2)


async def test_a_grant_that_names_no_level_or_key_stays_in_the_form(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await press_for(pilot, app, "g", GrantDialog)
            app.screen.query_one("#grant-who", Input).value = "not a level!"
            app.screen.query_one("#grant-what", Input).value = "hr"
            await submit(pilot)
            await wait_until(pilot, lambda: "neither a key id" in text(app, "#form-status"))
            assert not server.service.asked("grant_mcp")


async def test_change_sends_only_what_changed_and_turn_off_and_on_flip_enabled(server):
    service: FakeMcpService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await select(pilot, app, "#mcp-servers", "hr")
            await press_for(pilot, app, "e", McpServerDialog)
            assert app.screen.query_one("#mcp-url", Input).value == service.servers["hr"].url
            app.screen.query_one("#mcp-rate", Input).value = "120"
            await ok(pilot, app)
            await wait_until(pilot, lambda: "Changed hr" in said(app))
            assert service.asked("put_mcp_server")[-1] == PutMcpServerRequest(
                name="hr", create=False, set=["rate_per_minute"], rate_per_minute=120
            )
            await wait_until(pilot, lambda: "120/min" in rows(app, "#mcp-servers")["hr"])
            assert app.screen.check_action("turn_on", ()) is False
            await pilot.press("f")
            await wait_until(pilot, lambda: rows(app, "#mcp-servers")["hr"][1] == "off")
            assert service.asked("put_mcp_server")[-1] == PutMcpServerRequest(
                name="hr", create=False, set=["enabled"], enabled=False
            )
            # The same key turns it on again.
            await wait_until(pilot, lambda: app.screen.check_action("turn_on", ()) is True)
            await pilot.press("f")
            await wait_until(pilot, lambda: "on again" in said(app))
            assert service.asked("put_mcp_server")[-1].enabled is True


async def test_replace_credential_seals_the_new_token_and_shows_only_its_header_name(server):
    service: FakeMcpService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await select(pilot, app, "#mcp-servers", "hr")
            await press_for(pilot, app, "s", CredentialDialog)
            await submit(pilot)
            await wait_until(pilot, lambda: "empty credential" in text(app, "#form-status"))
            app.screen.query_one("#cred-secret", Input).value = TOKEN_TYPED
            await ok(pilot, app)
            await wait_until(pilot, lambda: "Replaced the credential of hr" in said(app))
            assert service.asked("put_mcp_server")[-1] == PutMcpServerRequest(
                name="hr",
                create=False,
                set=["secret_headers"],
                secret_headers={"Authorization": f"Bearer {TOKEN_TYPED}"},
            )
            assert service.sealed["hr"] == {"Authorization": f"Bearer {TOKEN_TYPED}"}
            assert TOKEN_TYPED not in screen_text(app)
            # A header of its own is offered again as the one to replace.
            service.servers["wiki"].sealed_header_names = ["X-Api-Key"]
            app.screen.reload()
            await select(pilot, app, "#mcp-servers", "wiki")
            await wait_until(
                pilot, lambda: "X-Api-Key" in " ".join(rows(app, "#mcp-servers")["wiki"])
            )
            await press_for(pilot, app, "s", CredentialDialog)
            assert app.screen.query_one("#cred-header", Input).value == "X-Api-Key"


async def test_remove_asks_then_removes_the_server_and_its_grants(server):
    service: FakeMcpService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await select(pilot, app, "#mcp-servers", "hr")
            await press_for(pilot, app, "d", Confirm)
            await pilot.click("#confirm-no")
            await wait_until(pilot, lambda: isinstance(app.screen, McpScreen))
            assert not service.asked("remove_mcp_server")
            await press_for(pilot, app, "d", Confirm)
            await pilot.press("y")
            await wait_until(pilot, lambda: "hr" not in rows(app, "#mcp-servers"))
            assert service.asked("remove_mcp_server") == [McpServerRequest(name="hr")]
            assert "Removed hr and its 1 grant(s)" in said(app)
            assert list(rows(app, "#mcp-grants")) == ["team:Acme/ml llmgw:admin.list_nodes"]


async def test_llmgw_admin_can_be_granted_but_not_tested_changed_turned_off_or_removed(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)
            await select(pilot, app, "#mcp-servers", "llmgw:admin")
            screen = app.screen
            for action in ("test", "change", "credential", "remove", "turn_off"):
                assert screen.check_action(action, ()) is None, action
            assert screen.check_action("grant", ()) is True
            await press_for(pilot, app, "g", GrantDialog)
            assert app.screen.query_one("#grant-what", Input).value == "llmgw:admin"


def test_header_lines_are_taken_as_ctl_takes_header_options():
    assert parse_headers("X-A=1\n\n  X-B: two words \n") == {"X-A": "1", "X-B": "two words"}
    with pytest.raises(Exception, match="given twice"):
        parse_headers("X-A=1\nx-a=2")


def test_ten_tabs_fit_80_columns_the_last_giving_up_their_titles_never_the_current_one():
    # Guards: the ninth tab (MCP), then the tenth (Settings), pushing the tab line past
    # 80 columns (the palette's key cut).
    room = 80 - 2 - 2  # the tab line's padding, the palette's key
    assert tabs_width(compact=True) > room
    for current in ("overview", "mirror", "mcp", "settings"):
        dropped = tight_tabs(current, room)
        assert current not in dropped
        assert tabs_width(compact=True, keys_only=dropped) <= room
        markup = tabs_markup(current, compact=True, keys_only=dropped)
        assert ("MCP" in markup) == ("mcp" not in dropped)
    assert tight_tabs("overview", room) == ("settings", "mcp", "mirror")
    assert tight_tabs("overview", 200) == ()


# -- the same admin calls as ctl ----------------------------------------------------------


@pytest.fixture
async def home_and_server(tmp_path):
    """The fake admin server, and an LLMGW_HOME whose server.yaml and token name it."""
    async with FakeAdminServer(service=FakeMcpService()) as srv:
        paths = Paths.under(tmp_path / "home")
        init_server(paths, hosts=["localhost"], ports={"admin": srv.port})
        paths.admin_token_file.write_text(TOKEN)
        yield paths.home, srv


async def ctl(home, *args: str):
    def run():
        return CliRunner().invoke(
            llmgw_cli, ["ctl", "mcp", *args, "--json"], env={"LLMGW_HOME": str(home)}
        )

    res = await asyncio.to_thread(run)
    assert res.exit_code == 0, res.output
    return res


def changes(service: FakeMcpService, since: int) -> list[tuple[str, object]]:
    """The calls after ``since`` that change or test something (reads left out)."""
    reads = ("list_mcp_servers", "list_mcp_grants", "get_mcp_server")
    return [(m, r) for m, r in service.calls[since:] if m not in reads]


async def test_each_action_calls_the_admin_method_its_ctl_command_calls(home_and_server, tmp_path):
    home, server = home_and_server
    service: FakeMcpService = server.service
    token_file = tmp_path / "jira.token"
    token_file.write_text(TOKEN_TYPED + "\n")
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mcp")
        async with app.run_test(size=SIZE) as pilot:
            await opened(pilot, app)

            async def both(screen_steps, *argv: str) -> None:
                mark = len(service.calls)
                await screen_steps()
                await wait_until(pilot, lambda: len(changes(service, mark)) == 1)
                by_screen = changes(service, mark)
                # What the screen did is undone by the command doing it again (or after).
                mark = len(service.calls)
                await ctl(home, *argv)
                assert changes(service, mark) == by_screen, argv

            async def add():
                await press_for(pilot, app, "a", McpServerDialog)
                app.screen.query_one("#mcp-name", Input).value = "jira"
                app.screen.query_one("#mcp-url", Input).value = "http://127.0.0.1:9200/mcp"
                app.screen.query_one("#mcp-headers", TextArea).text = "X-Team=ml"
                app.screen.query_one("#mcp-secret", Input).value = TOKEN_TYPED
                app.screen.query_one("#mcp-rate", Input).value = "30"
                await ok(pilot, app)
                await wait_until(pilot, lambda: "jira" in rows(app, "#mcp-servers"))
                service.servers.pop("jira")  # so that ctl's add is not refused

            await both(
                add,
                "add", "jira", "--url", "http://127.0.0.1:9200/mcp", "--header", "X-Team=ml",
                "--bearer-file", str(token_file), "--rate", "30",
            )  # fmt: skip
            await wait_until(pilot, lambda: "jira" in rows(app, "#mcp-servers"))
            await select(pilot, app, "#mcp-servers", "jira")

            async def change():
                await press_for(pilot, app, "e", McpServerDialog)
                app.screen.query_one("#mcp-url", Input).value = "http://127.0.0.1:9201/mcp"
                app.screen.query_one("#mcp-timeout", Input).value = "20"
                await ok(pilot, app)

            await both(change, "change", "jira", "--url", "http://127.0.0.1:9201/mcp",
                       "--timeout", "20")  # fmt: skip

            async def credential():
                await press_for(pilot, app, "s", CredentialDialog)
                app.screen.query_one("#cred-secret", Input).value = TOKEN_TYPED
                await ok(pilot, app)

            await both(credential, "change", "jira", "--bearer-file", str(token_file))
            await wait_until(pilot, lambda: app.screen.check_action("turn_off", ()) is True)
            await both(lambda: pilot.press("f"), "change", "jira", "--disable")
            await wait_until(pilot, lambda: app.screen.check_action("turn_on", ()) is True)
            await both(lambda: pilot.press("f"), "change", "jira", "--enable")
            await both(lambda: pilot.press("t"), "test", "jira")

            async def grant():
                await press_for(pilot, app, "g", GrantDialog)
                app.screen.query_one("#grant-who", Input).value = "Acme/ml"
                await ok(pilot, app)

            await both(grant, "grant", "Acme/ml", "jira")

            async def revoke():
                await press_for(pilot, app, "x", GrantDialog)
                app.screen.query_one("#grant-who", Input).value = "Acme/ml"
                app.screen.query_one("#grant-what", Input).value = "jira"
                await ok(pilot, app)

            await both(revoke, "revoke", "Acme/ml", "jira")

            async def remove():
                await press_for(pilot, app, "d", Confirm)
                await pilot.press("y")
                await wait_until(pilot, lambda: "jira" not in rows(app, "#mcp-servers"))
                service.servers["jira"] = company("jira", "http://127.0.0.1:9201/mcp")

            await both(remove, "remove", "jira", "--yes")
