"""The Batches screen against a real admin server over gRPC, driven by Textual's pilot."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static

from llmgw.present.batchfmt import NO_BATCHES, batch_cells, batch_details
from tests.tui.kit.fake_admin import FakeAdminServer, batch
from tests.tui.kit.pilot import text, wait_until
from tests.tui.parity.kit import plain
from tui.app import LlmgwApp
from tui.screens.batches.batches import BatchesScreen
from tui.screens.dialogs import Confirm

SIZE = (160, 48)


def table(app: LlmgwApp) -> DataTable:
    return app.screen.query_one("#batches", DataTable)


def rows(app: LlmgwApp) -> dict[str, list[str]]:
    """Every row as plain text, by batch id."""
    t = table(app)
    return {str(key.value): [str(c) for c in t.get_row(key)] for key in t.rows}


def order(app: LlmgwApp) -> list[str]:
    t = table(app)
    return [str(t.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(t.row_count)]


def progress(app: LlmgwApp, batch_id: str) -> str:
    return str(table(app).get_cell(batch_id, "progress"))


async def select(pilot, app: LlmgwApp, batch_id: str) -> None:
    t = table(app)
    t.focus()
    t.move_cursor(row=t.get_row_index(batch_id))
    # The pane follows the cursor once the table says the row is highlighted.
    await wait_until(pilot, lambda: text(app, "#batch-pane").split()[1] == batch_id)


@pytest.fixture
async def server():
    async with FakeAdminServer() as srv:
        yield srv


def two_batches(server) -> None:
    server.service.batches = {
        "batch_old": batch(
            "batch_old",
            status="completed",
            total=200,
            completed=198,
            failed=2,
            endpoint="/v1/embeddings",
            created_at="2026-09-01T12:00:00+00:00",
        ),
        "batch_new": batch("batch_new", total=200, completed=70),
    }


async def test_the_batches_screen_lists_each_batch_with_its_progress_as_the_command_draws_it(
    server,
):
    two_batches(server)
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="batches")
        async with app.run_test(size=SIZE) as pilot:
            assert isinstance(app.screen, BatchesScreen)
            await wait_until(pilot, lambda: len(table(app).rows) == 2)
            # Newest first, as `ctl batches list` prints them, cell for cell.
            assert order(app) == ["batch_new", "batch_old"]
            for batch_id, view in server.service.batches.items():
                assert rows(app)[batch_id] == [str(c) for c in batch_cells(view)]
            assert progress(app, "batch_new") == "███░░░░░░░ 70/200 35%"
            assert progress(app, "batch_old") == "██████████ 200/200 100%"
            # The pane is the selected batch as `ctl batches show` draws it.
            assert app.screen.selected_batch().id == "batch_new"
            pane = text(app, "#batch-pane")
            assert pane == plain(batch_details(server.service.batches["batch_new"]), 200)
            assert "200 in all: 70 completed, 0 failed, 130 to go" in pane
            await select(pilot, app, "batch_old")
            assert "file-out-batch_old" in text(app, "#batch-pane")
            assert "Batches: 2 (1 not finished)" in text(app, "#status")


async def test_progress_moves_while_the_screen_is_shown_without_a_key_pressed(server):
    two_batches(server)
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="batches")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(table(app).rows) == 2)
            server.service.batches["batch_new"].request_counts.completed = 150
            # Read again by itself every REFRESH_S (bounded wait, not a timing).
            await wait_until(pilot, lambda: progress(app, "batch_new").endswith("150/200 75%"))
            assert "150 completed" in text(app, "#batch-pane")
            # A batch made meanwhile comes in at the top; the cursor stays on its batch.
            server.service.batches["batch_newest"] = batch(
                "batch_newest", status="validating", total=0, created_at="2026-09-01T14:00:00+00:00"
            )
            await wait_until(pilot, lambda: len(table(app).rows) == 3)
            assert order(app) == ["batch_newest", "batch_new", "batch_old"]
            assert app.screen.selected_batch().id == "batch_new"
            assert progress(app, "batch_newest") == "-"


async def test_cancel_asks_first_then_the_batch_is_cancelling_in_the_table(server):
    two_batches(server)
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="batches")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(table(app).rows) == 2)
            await pilot.press("x")
            await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
            question = text(app, "#confirm-box Static")
            assert "Cancel batch_new of Acme/ml/search" in question
            assert "70 of 200 answered" in question
            # Escape changes nothing.
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, BatchesScreen))
            assert server.service.batches["batch_new"].status == "in_progress"

            await pilot.press("x")
            await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
            await pilot.press("y")
            await wait_until(
                pilot, lambda: "Requests in flight finish" in text(app, "#action-line")
            )
            assert server.service.batches["batch_new"].status == "cancelling"
            await wait_until(pilot, lambda: "cancelling" in rows(app)["batch_new"][1])
            # Cancelling already: nothing more to ask for.
            assert app.screen.check_action("cancel_batch", ()) is False


async def test_cancel_is_not_offered_for_a_finished_batch(server):
    two_batches(server)
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="batches")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(table(app).rows) == 2)
            await select(pilot, app, "batch_old")
            assert app.screen.check_action("cancel_batch", ()) is False
            await pilot.press("x")
            await pilot.pause()
            assert isinstance(app.screen, BatchesScreen)


async def test_a_batch_that_finished_before_the_cancel_arrived_is_said_so_in_plain_words(server):
    two_batches(server)
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="batches")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(table(app).rows) == 2)
            await pilot.press("x")
            await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
            # It completes while the question is open.
            done = server.service.batches["batch_new"]
            done.status, done.request_counts.completed = "completed", 200
            await pilot.press("y")
            await wait_until(pilot, lambda: app.screen.query_one("#action-line").display)
            said = text(app, "#action-line")
            assert "batch batch_new has already finished (completed)" in said
            assert "llmgw ctl batches show batch_new" in said
            await wait_until(pilot, lambda: "completed" in rows(app)["batch_new"][1])


async def test_no_batches_says_how_clients_make_them(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="batches")
        async with app.run_test(size=SIZE) as pilot:
            empty = app.screen.query_one("#batches-empty", Static)
            await wait_until(pilot, lambda: bool(empty.display))
            assert text(app, "#batches-empty").strip() == NO_BATCHES
            assert not table(app).display
            assert app.screen.check_action("cancel_batch", ()) is None


async def test_b_opens_the_batches_screen_from_any_other(server):
    two_batches(server)
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("b")
            await wait_until(pilot, lambda: isinstance(app.screen, BatchesScreen))
            await wait_until(pilot, lambda: len(table(app).rows) == 2)
