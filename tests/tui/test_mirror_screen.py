"""The Mirror screen against a real admin server over gRPC, driven by Textual's pilot.

The server answers the Mirror* RPCs from lists (tests/tui/kit/fake_mirror.py);
the same screen against a real gatewayd and a real mirror: tests/tui/parity/test_parity.py.
"""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Checkbox, DataTable, Input

from llmgw.present.mirrorfmt import mirror_cells, peer_cells, revision_cells
from tests.tui.kit.fake_admin import FakeAdminServer
from tests.tui.kit.fake_mirror import (
    GEMMA,
    GEMMA_COMMIT,
    MIRROR_A,
    QUOTA_ERROR,
    TINY,
    FakeMirrorService,
)
from tests.tui.kit.pilot import text, wait_until
from tui.app import LlmgwApp
from tui.screens.dialogs import Confirm
from tui.screens.mirror.mirror import MirrorScreen, revision_key
from tui.screens.mirror.mirror_add import MirrorAddDialog, split_globs

SIZE = (160, 48)


@pytest.fixture
async def server():
    async with FakeAdminServer(service=FakeMirrorService()) as srv:
        yield srv


def rows(app: LlmgwApp, selector: str) -> dict[str, list[str]]:
    t = app.screen.query_one(selector, DataTable)
    return {str(key.value): [str(c) for c in t.get_row(key)] for key in t.rows}


def cells(view_cells) -> list[str]:
    return [str(c) for c in view_cells]


async def test_the_mirror_screen_shows_mirrors_revisions_disk_and_peers_as_the_commands_draw_them(
    server,
):
    service: FakeMirrorService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mirror")
        async with app.run_test(size=SIZE) as pilot:
            assert isinstance(app.screen, MirrorScreen)
            await wait_until(pilot, lambda: len(rows(app, "#revisions")) == 2)
            shown = rows(app, "#mirrors")
            assert [shown[m.url] for m in service.mirrors] == [
                cells(mirror_cells(m)) for m in service.mirrors
            ]
            held = rows(app, "#revisions")
            for r in service.revisions:
                assert held[revision_key(r)] == cells(revision_cells(r))
            assert rows(app, "#peers") == {p.url: cells(peer_cells(p)) for p in service.peers}
            assert "1m 35s" in rows(app, "#peers")[service.peers[0].url]
            disk = text(app, "#mirror-disk")
            assert "1.20 GB used of 10.0 GB (12%)" in disk and "12.0 MB unreferenced" in disk
            status = text(app, "#status")
            assert "Mirrors: 2 (1 up)" in status and MIRROR_A in status


async def test_add_sends_what_the_dialog_says_and_shows_the_pull_live_until_held(server):
    service: FakeMirrorService = server.service
    service.gate = asyncio.Event()
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mirror")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(rows(app, "#revisions")) == 2)
            await pilot.press("a")
            await wait_until(pilot, lambda: isinstance(app.screen, MirrorAddDialog))
            app.screen.query_one("#add-source", Input).value = "hf:acme/fresh@main"
            app.screen.query_one("#add-include", Input).value = "*.gguf, *.json"
            app.screen.query_one("#add-pickle", Checkbox).value = True
            await pilot.click("#form-ok")
            await wait_until(pilot, lambda: isinstance(app.screen, MirrorScreen))
            # Half way, as the mirror reports it: bytes, rate and time left.
            await wait_until(pilot, lambda: "50%" in text(app, "#action-line"))
            line = text(app, "#action-line")
            assert "fetching acme/fresh" in line and "126 MB/253 MB" in line
            assert "42.0 MB/s" in line and "ETA 3 s" in line and "1/2 files" in line
            sent = service.adds[-1]
            assert (sent.source, sent.include, sent.allow_pickle) == (
                "hf:acme/fresh@main",
                ["*.gguf", "*.json"],
                True,
            )
            service.gate.set()
            await wait_until(
                pilot, lambda: "Held: acme/fresh@eeeeeeeeeeee" in text(app, "#action-line")
            )
            await wait_until(pilot, lambda: len(rows(app, "#revisions")) == 3)
            assert not app.screen.adding


async def test_a_mistake_in_the_add_dialog_stays_in_it_in_the_commands_words(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mirror")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(rows(app, "#revisions")) == 2)
            await pilot.press("a")
            await wait_until(pilot, lambda: isinstance(app.screen, MirrorAddDialog))
            app.screen.query_one("#add-source", Input).value = "hf:justname"
            await pilot.click("#form-ok")
            await wait_until(pilot, lambda: "hf:org/name" in text(app, "#form-status"))
            assert isinstance(app.screen, MirrorAddDialog) and not server.service.adds


async def test_an_add_over_the_quota_says_what_to_remove_on_the_action_line(server):
    # Guards: a refused add leaving the screen "adding…" with Add dimmed for good.
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mirror")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(rows(app, "#revisions")) == 2)
            await pilot.press("a")
            await wait_until(pilot, lambda: isinstance(app.screen, MirrorAddDialog))
            app.screen.query_one("#add-source", Input).value = "hf:big/quota-buster"
            await pilot.click("#form-ok")
            await wait_until(pilot, lambda: "quota" in text(app, "#action-line"))
            line = " ".join(text(app, "#action-line").split())
            assert QUOTA_ERROR.split(":")[1].strip()[:30] in line
            assert app.screen.query_one("#action-line").has_class("-error")
            await wait_until(pilot, lambda: not app.screen.adding)


async def test_remove_asks_then_removes_the_selected_revision(server):
    service: FakeMirrorService = server.service
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mirror")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(rows(app, "#revisions")) == 2)
            table = app.screen.query_one("#revisions", DataTable)
            table.focus()
            gemma = next(r for r in service.revisions if r.repo == GEMMA)
            table.move_cursor(row=table.get_row_index(revision_key(gemma)))
            await pilot.pause()
            await pilot.press("d")
            await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
            await pilot.click("#confirm-no")
            await wait_until(pilot, lambda: isinstance(app.screen, MirrorScreen))
            assert not service.removes
            await pilot.press("d")
            await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
            await pilot.press("y")
            await wait_until(pilot, lambda: len(rows(app, "#revisions")) == 1)
            asked = service.removes[-1]
            assert (asked.repo, asked.revision) == (GEMMA, GEMMA_COMMIT)
            assert "Removed google/gemma-3-270m-gguf@aaaaaaaaaaaa; 253 MB freed" in text(
                app, "#action-line"
            )
            assert list(rows(app, "#revisions")) == [revision_key(service.revisions[0])]
            assert service.revisions[0].repo == TINY


async def test_no_mirror_up_is_said_on_the_status_line_and_add_is_dimmed(server):
    service: FakeMirrorService = server.service
    service.mirrors[0].state, service.mirrors[0].reason = "down", "timed out"
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="mirror")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: "none up" in text(app, "#status"))
            assert "timed out" in rows(app, "#mirrors")[MIRROR_A][-1]
            assert app.screen.check_action("add", ()) is None


def test_globs_are_taken_apart_as_the_command_takes_them_one_by_one():
    assert split_globs("*.gguf, *.json  tokenizer*") == ["*.gguf", "*.json", "tokenizer*"]
    assert split_globs("  ") == []


async def test_an_add_cut_off_by_gatewayd_going_away_says_the_mirror_goes_on():
    # Guards: a followed add whose stream was cut left the screen "adding…" for good.
    service = FakeMirrorService()
    service.gate = asyncio.Event()
    server = await FakeAdminServer(service=service).start()
    try:
        async with server.client() as client:
            app = LlmgwApp(client, first_screen="mirror")
            async with app.run_test(size=SIZE) as pilot:
                await wait_until(pilot, lambda: len(rows(app, "#revisions")) == 2)
                await pilot.press("a")
                await wait_until(pilot, lambda: isinstance(app.screen, MirrorAddDialog))
                app.screen.query_one("#add-source", Input).value = "hf:acme/fresh"
                await pilot.click("#form-ok")
                await wait_until(pilot, lambda: "50%" in text(app, "#action-line"))
                await server.stop()
                await wait_until(pilot, lambda: "was cut" in text(app, "#action-line"))
                assert "llmgw ctl mirror list" in " ".join(text(app, "#action-line").split())
                await wait_until(pilot, lambda: not app.screen.adding)
    finally:
        await server.stop()
