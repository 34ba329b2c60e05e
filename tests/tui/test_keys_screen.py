"""The Keys & tenancy screen and its dialogs against a real gatewayd (no agents needed)."""

from __future__ import annotations

import pytest
from textual.widgets import Checkbox, DataTable, Input, Static, Tree

from llmgw.present.keyfmt import key_cells, tenant_line
from tests.cluster_fixture import running_cluster
from tests.tui.test_nodes_screen import SIZE, wait_until
from tui.app import LlmgwApp
from tui.screens.dialogs import Confirm
from tui.screens.keys.key_dialogs import (
    KeyDialog,
    LevelDialog,
    LimitsDialog,
    RenameDialog,
    RotateDialog,
    SecretShown,
)
from tui.screens.keys.keys import KeysScreen

SEARCH = "Acme/ml/search"


@pytest.fixture(name="cluster")
async def tenancy_cluster(tmp_path):
    """A real gatewayd holding Acme/ml/{search,chat} and Beta, with two keys in search."""
    async with running_cluster(tmp_path) as c:
        async with c.admin() as admin:
            await admin.create_tenant("project", SEARCH, parents=True)
            await admin.create_tenant("project", "Acme/ml/chat")
            await admin.create_tenant("org", "Beta")
            await admin.create_key(SEARCH, name="web", rpm=60, tpm=1000)
            await admin.create_key(SEARCH, name="batch", models=["sim-chat"])
        yield c


def screen(app: LlmgwApp) -> KeysScreen:
    assert isinstance(app.screen, KeysScreen)
    return app.screen


def rows(app: LlmgwApp) -> dict[str, list[str]]:
    """The keys table as plain text, by key id."""
    t = app.screen.query_one("#keys", DataTable)
    return {str(key.value): [str(c) for c in t.get_row(key)] for key in t.rows}


def tree(app: LlmgwApp) -> Tree:
    return app.screen.query_one("#tenants", Tree)


def tree_paths(app: LlmgwApp) -> list[str]:
    """Every level in the tree, top to bottom (depth first), by path."""
    out: list[str] = []

    def walk(node) -> None:
        for child in node.children:
            out.append(child.data)
            walk(child)

    walk(tree(app).root)
    return out


def notes(app: LlmgwApp) -> str:
    return "\n".join(n.message for n in app._notifications)


async def open_keys(app: LlmgwApp, pilot) -> KeysScreen:
    await pilot.press("k")
    await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen))
    await wait_until(pilot, lambda: bool(tree_paths(app)))
    return screen(app)


async def select_level(app: LlmgwApp, pilot, path: str) -> None:
    t = tree(app)

    def find(node):
        if node.data == path:
            return node
        return next((n for c in node.children if (n := find(c)) is not None), None)

    t.move_cursor(find(t.root))
    await wait_until(pilot, lambda: screen(app).shown_path == path)


async def open_dialog(app: LlmgwApp, pilot, key: str, kind: type):
    await pilot.press(key)
    return await showing(app, pilot, kind)


async def showing(app: LlmgwApp, pilot, kind: type):
    # The screen is pushed before its widgets are composed and mounted (CI once read
    # it in between): wait for it to be on screen whole.
    await wait_until(pilot, lambda: isinstance(app.screen, kind) and app.screen.is_mounted)
    await pilot.pause()
    return app.screen


async def back(app: LlmgwApp, pilot) -> None:
    await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen))


async def test_the_tree_and_the_keys_are_what_ctl_lists(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_keys(app, pilot)
            # `llmgw ctl project list --json` (and org, team): the same call, every level.
            tenants = (await client.list_tenants()).tenants
            assert tree_paths(app) == [t.path for t in tenants]
            assert tree_paths(app) == ["Acme", "Acme/ml", "Acme/ml/chat", SEARCH, "Beta"]

            # The root shows every key, drawn as `llmgw ctl keys list` draws it.
            keys = (await client.list_keys()).keys
            await wait_until(pilot, lambda: len(rows(app)) == 2)
            assert rows(app) == {k.key_id: [str(c) for c in key_cells(k)] for k in keys}

            # A project shows its own keys; a level's line is the command's.
            await select_level(app, pilot, SEARCH)
            search = {k.key_id for k in (await client.list_keys(SEARCH)).keys}
            assert set(rows(app)) == search
            level = next(t for t in tenants if t.path == SEARCH)
            assert str(app.screen.query_one("#level", Static).render()) == tenant_line(level)
            await select_level(app, pilot, "Beta")
            assert rows(app) == {}
            assert app.screen.query_one("#keys-empty").display


async def test_a_key_made_on_the_screen_shows_its_secret_once(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_keys(app, pilot)
            # A key needs a project: on an org, c does nothing.
            await select_level(app, pilot, "Beta")
            await pilot.press("c")
            assert isinstance(app.screen, KeysScreen)

            await select_level(app, pilot, SEARCH)
            dialog = await open_dialog(app, pilot, "c", KeyDialog)
            await pilot.press(*"ci-bot")  # the name field has the focus
            dialog.query_one("#key-rpm", Input).value = "30"
            dialog.query_one("#key-expires", Input).value = "90d"
            await pilot.click("#form-ok")
            shown = await showing(app, pilot, SecretShown)
            secret = shown.secret
            assert secret in str(shown.query_one("#secret-text", Static).render())
            assert "only time" in str(shown.query_one("#secret-warning", Static).render())
            await pilot.press("enter")
            await back(app, pilot)

            made = next(k for k in (await client.list_keys(SEARCH)).keys if k.name == "ci-bot")
            assert secret.startswith(made.prefix) and made.secret == ""
            assert made.limits.rpm == 30 and made.expires_at
            await wait_until(pilot, lambda: made.key_id in rows(app))
            # The table never shows the secret, only its prefix.
            assert not any(secret in cell for row in rows(app).values() for cell in row)
            assert screen(app).selected_key().key_id == made.key_id


async def test_revoking_from_the_screen_asks_then_revokes(cluster):
    async with cluster.admin() as client:
        web = next(k for k in (await client.list_keys()).keys if k.name == "web")
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_keys(app, pilot)
            await wait_until(pilot, lambda: web.key_id in rows(app))
            table = app.screen.query_one("#keys", DataTable)
            table.focus()
            table.move_cursor(row=table.get_row_index(web.key_id))

            await open_dialog(app, pilot, "x", Confirm)
            await pilot.press("escape")
            await back(app, pilot)
            assert rows(app)[web.key_id][-1] == "active"

            await open_dialog(app, pilot, "x", Confirm)
            await pilot.click("#confirm-yes")
            await back(app, pilot)
            await wait_until(pilot, lambda: rows(app)[web.key_id][-1] == "revoked")
            now = {k.key_id: k for k in (await client.list_keys()).keys}
            assert now[web.key_id].revoked_at
            assert sum(1 for k in now.values() if k.revoked_at) == 1

            # Rotating a revoked key is refused: a notification, not a crash.
            await open_dialog(app, pilot, "t", RotateDialog)
            await pilot.press("enter")
            await back(app, pilot)
            await wait_until(pilot, lambda: "was revoked" in notes(app))
            assert app.is_running


async def test_rotating_from_the_screen_shows_the_new_secret(cluster):
    async with cluster.admin() as client:
        batch = next(k for k in (await client.list_keys()).keys if k.name == "batch")
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_keys(app, pilot)
            await wait_until(pilot, lambda: batch.key_id in rows(app))
            table = app.screen.query_one("#keys", DataTable)
            table.focus()
            table.move_cursor(row=table.get_row_index(batch.key_id))

            dialog = await open_dialog(app, pilot, "t", RotateDialog)
            assert dialog.query_one("#rotate-overlap", Input).value == "1h"
            await pilot.press("enter")
            shown = await showing(app, pilot, SecretShown)
            assert shown.key.rotated_from == batch.key_id
            assert f"replaces {batch.key_id}" in str(shown.query_one("#secret-text").render())
            await pilot.press("escape")
            await back(app, pilot)

            keys = {k.key_id: k for k in (await client.list_keys()).keys}
            new = keys[shown.key.key_id]
            assert shown.secret.startswith(new.prefix) and new.models == ["sim-chat"]
            assert keys[batch.key_id].kind == "rotated"
            await wait_until(pilot, lambda: rows(app).get(batch.key_id, [""])[1] == "rotated")
            assert new.key_id in rows(app)


async def test_the_limits_dialog_sends_only_what_changed(cluster):
    async with cluster.admin() as client:
        web = next(k for k in (await client.list_keys()).keys if k.name == "web")
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_keys(app, pilot)
            await wait_until(pilot, lambda: web.key_id in rows(app))
            table = app.screen.query_one("#keys", DataTable)
            table.focus()
            table.move_cursor(row=table.get_row_index(web.key_id))

            # With the table focused, l is the key's limits, filled in as they are.
            dialog = await open_dialog(app, pilot, "l", LimitsDialog)
            assert dialog.scope == web.key_id
            assert dialog.query_one("#limits-rpm", Input).value == "60"
            assert dialog.query_one("#limits-tpm", Input).value == "1000"
            assert "Empty a field to lift" in str(dialog.query_one("#form-status").render())
            dialog.query_one("#limits-budget-month", Input).value = "25"
            await pilot.click("#form-ok")
            await back(app, pilot)

            async def limits():
                return next(k for k in (await client.list_keys()).keys if k.key_id == web.key_id)

            await wait_until(pilot, lambda: "25.00 a month" in rows(app)[web.key_id][6])
            got = (await limits()).limits
            assert (got.rpm, got.tpm, got.budget_month_micros) == (60, 1000, 25_000_000)
            assert got.budget_day_micros is None

            # An emptied field lifts that limit, and only that one.
            dialog = await open_dialog(app, pilot, "l", LimitsDialog)
            dialog.query_one("#limits-tpm", Input).value = ""
            await pilot.click("#form-ok")
            await back(app, pilot)
            await wait_until(pilot, lambda: "tokens/min" not in rows(app)[web.key_id][6])
            got = (await limits()).limits
            assert (got.rpm, got.tpm, got.budget_month_micros) == (60, None, 25_000_000)

            # Nothing changed: said in the dialog, nothing sent.
            dialog = await open_dialog(app, pilot, "l", LimitsDialog)
            await pilot.click("#form-ok")
            status = dialog.query_one("#form-status", Static)
            await wait_until(pilot, lambda: status.has_class("-error"))
            assert "nothing changed" in str(status.render())
            # (A second click on OK at once would be taken for the first: type Enter.)
            await pilot.click("#limits-rpm")
            await pilot.press("ctrl+u", *"lots", "enter")
            await wait_until(pilot, lambda: "not a whole number" in str(status.render()))
            await pilot.press("escape")
            await back(app, pilot)

            # With the tree focused, l is the level's.
            await select_level(app, pilot, SEARCH)
            tree(app).focus()
            dialog = await open_dialog(app, pilot, "l", LimitsDialog)
            assert dialog.scope == SEARCH
            dialog.query_one("#limits-rpm", Input).value = "500"
            await pilot.click("#form-ok")
            await back(app, pilot)

            async def project_rpm():
                ts = (await client.list_tenants("project")).tenants
                return next(t for t in ts if t.path == SEARCH).limits.rpm == 500

            await wait_until(pilot, lambda: "500 requests/min" in notes(app))
            assert await project_rpm()


async def test_levels_are_created_renamed_and_removed_from_the_screen(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await open_keys(app, pilot)

            # Without "make missing parents", gatewayd refuses: a notification.
            dialog = await open_dialog(app, pilot, "a", LevelDialog)
            await pilot.press(*"Gamma/o")  # the path field has the focus
            dialog.query_one("#level-path", Input).insert_text_at_cursor("ps/infra")
            kind = dialog.query_one("#level-kind", Static)
            await wait_until(pilot, lambda: "project Gamma/ops/infra" in str(kind.render()))
            await pilot.press("enter")
            await back(app, pilot)
            await wait_until(pilot, lambda: "no organization 'Gamma'" in notes(app))
            assert app.is_running and "Gamma" not in tree_paths(app)

            dialog = await open_dialog(app, pilot, "a", LevelDialog)
            dialog.query_one("#level-path", Input).value = "Gamma/ops/infra"
            dialog.query_one("#level-parents", Checkbox).value = True
            await pilot.click("#form-ok")
            await back(app, pilot)
            await wait_until(pilot, lambda: "Gamma/ops/infra" in tree_paths(app))
            assert {"Gamma", "Gamma/ops"} <= {t.path for t in (await client.list_tenants()).tenants}
            # The cursor is on the new project: c makes a key there.
            assert screen(app).selected_path() == "Gamma/ops/infra"

            # A path of four parts is refused in the dialog itself.
            dialog = await open_dialog(app, pilot, "a", LevelDialog)
            dialog.query_one("#level-path", Input).value = "a/b/c/d"
            await pilot.click("#form-ok")
            status = dialog.query_one("#form-status", Static)
            await wait_until(pilot, lambda: status.has_class("-error"))
            assert "ORG/TEAM/PROJECT" in str(status.render())
            await pilot.press("escape")
            await back(app, pilot)

            dialog = await open_dialog(app, pilot, "e", RenameDialog)
            dialog.query_one("#rename-name", Input).value = "platform"
            await pilot.click("#form-ok")
            await back(app, pilot)
            await wait_until(pilot, lambda: "Gamma/ops/platform" in tree_paths(app))
            assert "Gamma/ops/infra" not in tree_paths(app)

            await open_dialog(app, pilot, "d", Confirm)
            await pilot.press("y")
            await back(app, pilot)
            await wait_until(pilot, lambda: "Gamma/ops/platform" not in tree_paths(app))
            assert screen(app).selected_path() == "Gamma/ops"

            # A level with keys beneath cannot go: gatewayd says why.
            await select_level(app, pilot, SEARCH)
            await open_dialog(app, pilot, "d", Confirm)
            await pilot.press("y")
            await back(app, pilot)
            await wait_until(pilot, lambda: "API keys that work" in notes(app))
            assert SEARCH in tree_paths(app)
