"""The Usage screen against a real gatewayd, with usage rows written to its store as the gateway does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from textual.widgets import DataTable, Select, Sparkline, Static

import tui.screens.keys.usage as usage_screen
from gatewayd.gateway.metering.usage import UsageRow, UsageWriter
from llmgw.present.usagefmt import usage_cells
from tests.cluster_fixture import Cluster, running_cluster
from tests.tui.test_nodes_screen import SIZE, wait_until
from tui.app import LlmgwApp
from tui.screens.keys.keys import KeysScreen
from tui.screens.keys.usage import UsageScreen
from tui.screens.nodes.nodes import NodesScreen

SEARCH, CHAT = "Acme/ml/search", "Acme/ml/chat"


async def record(cluster: Cluster, *rows: UsageRow) -> None:
    """Write rows to the store as the gateway's usage writer does."""
    writer = UsageWriter(cluster.server.store)
    for row in rows:
        writer.add(row)
    await writer.flush()


def row(project: str, model: str, ago: timedelta, *, key: str = "key_a", status: int = 200):
    return UsageRow(
        key_id=key,
        project=project,
        model=model,
        served_model=model,
        prompt_tokens=120,
        cached_tokens=20,
        completion_tokens=30,
        cost_micros=1_500,
        latency_ms=850.0,
        ttft_ms=120.0 if status == 200 else None,
        status=status,
        at=datetime.now(UTC) - ago,
    )


@pytest.fixture(name="cluster")
async def usage_cluster(tmp_path):
    """A real gatewayd whose store holds requests of 10 minutes, 3 hours and 3 days ago."""
    async with running_cluster(tmp_path) as c:
        await record(
            c,
            row(SEARCH, "chat", timedelta(minutes=10)),
            row(SEARCH, "chat", timedelta(minutes=12), key="key_b"),
            row(CHAT, "embed", timedelta(hours=3), status=500),
            row(SEARCH, "chat", timedelta(days=3)),
        )
        yield c


def screen(app: LlmgwApp) -> UsageScreen:
    assert isinstance(app.screen, UsageScreen)
    return app.screen


def rows(app: LlmgwApp) -> list[list[str]]:
    t = app.screen.query_one("#usage", DataTable)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


def headings(app: LlmgwApp) -> list[str]:
    t = app.screen.query_one("#usage", DataTable)
    return [str(c.label) for c in t.columns.values()]


async def open_usage(app: LlmgwApp, pilot) -> UsageScreen:
    await pilot.press("u")
    await wait_until(pilot, lambda: isinstance(app.screen, UsageScreen))
    await wait_until(pilot, lambda: screen(app).reply is not None)
    return screen(app)


async def showing(pilot, s: UsageScreen, range_name: str, grouping: str) -> None:
    """Wait until the table answers this period and grouping (the selectors change first)."""
    await wait_until(pilot, lambda: s.shown == (range_name, grouping))


async def same_as_ctl(app: LlmgwApp, client) -> None:
    """The table is what `llmgw ctl usage --by … --from … --to …` gets for the same period."""
    by, from_, to = screen(app).asked
    reply = await client.usage(list(by), from_=from_, to=to)
    assert rows(app) == [[str(c) for c in usage_cells(g, by)] for g in reply.groups]
    assert screen(app).query_one("#usage-series", Sparkline).data == list(reply.series)


async def test_the_sums_are_what_ctl_usage_gets_for_the_same_period(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            s = await open_usage(app, pilot)
            # The last 24 hours by project, as `llmgw ctl usage` defaults to.
            await showing(pilot, s, "24h", "project")
            await same_as_ctl(app, client)
            assert headings(app)[:3] == ["PROJECT", "REQUESTS", "ERRORS"]
            by_project = {r[0]: r for r in rows(app)}
            assert set(by_project) == {SEARCH, CHAT}
            assert by_project[SEARCH][1:3] == ["2", "0"]
            assert by_project[CHAT][1:3] == ["1", "1"]
            # 2 × 1500 micro-units of money; averages of 850 ms and a TTFT of 120 ms.
            assert by_project[SEARCH][6:] == ["0.003", "850 ms", "120 ms"]
            # The sparkline counts every request of the period.
            assert sum(s.query_one("#usage-series", Sparkline).data) == 3
            label = str(s.query_one("#usage-series-label", Static).render())
            assert "over the last 24 h: 3 in all" in label


async def test_period_and_grouping_change_with_t_and_g(cluster):
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            s = await open_usage(app, pilot)
            await showing(pilot, s, "24h", "project")

            await pilot.press("t")  # 24 h → 7 days: the request of 3 days ago counts
            await showing(pilot, s, "7d", "project")
            await same_as_ctl(app, client)
            assert {r[0]: r[1] for r in rows(app)} == {SEARCH: "3", CHAT: "1"}
            assert sum(s.query_one("#usage-series", Sparkline).data) == 4

            await pilot.press("g")  # project → model
            await showing(pilot, s, "7d", "model")
            await same_as_ctl(app, client)
            assert {r[0]: r[1] for r in rows(app)} == {"chat": "3", "embed": "1"}

            await pilot.press("g")  # → project and model: two columns of names
            await showing(pilot, s, "7d", "project+model")
            await same_as_ctl(app, client)
            assert headings(app)[:3] == ["PROJECT", "MODEL", "REQUESTS"]

            # The selectors do the same as the keys.
            s.query_one("#usage-by", Select).value = "key"
            s.query_one("#usage-range", Select).value = "1h"
            await showing(pilot, s, "1h", "key")
            await same_as_ctl(app, client)
            assert {r[0]: r[1] for r in rows(app)} == {"key_a": "1", "key_b": "1"}

            # 30 days take in one of 20 days ago, written while the screen is open.
            await record(cluster, row(SEARCH, "chat", timedelta(days=20)))
            s.query_one("#usage-range", Select).value = "30d"
            await showing(pilot, s, "30d", "key")
            assert {r[0]: r[1] for r in rows(app)} == {"key_a": "4", "key_b": "1"}


async def test_new_usage_shows_without_a_key_press(cluster, monkeypatch):
    # The screen asks again on a timer; a short one keeps the test quick.
    monkeypatch.setattr(usage_screen, "REFRESH_S", 0.2)
    async with cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            s = await open_usage(app, pilot)
            await showing(pilot, s, "24h", "project")
            await record(cluster, row("Beta/x/y", "chat", timedelta(seconds=5)))
            await wait_until(pilot, lambda: "Beta/x/y" in [r[0] for r in rows(app)])
            await same_as_ctl(app, client)

            # The other screens still switch, and Usage comes back as it was.
            await pilot.press("n")
            await wait_until(pilot, lambda: isinstance(app.screen, NodesScreen))
            await pilot.press("k")
            await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen))
            shown = {b.binding.key for b in app.screen.active_bindings.values() if b.binding.show}
            assert {"a", "c", "x", "l", "e", "d"} <= shown
            # The screens' keys work everywhere; the header's tabs name them, not the footer.
            assert {"o", "k", "u"} <= set(app.screen.active_bindings)
            await pilot.press("u")
            assert app.screen is s


async def test_an_empty_period_says_there_were_no_requests(tmp_path):
    async with running_cluster(tmp_path) as cluster, cluster.admin() as client:
        app = LlmgwApp(client)
        async with app.run_test(size=SIZE) as pilot:
            s = await open_usage(app, pilot)
            empty = s.query_one("#usage-empty", Static)
            await wait_until(pilot, lambda: empty.display)
            assert "No requests in the last 24 h" in str(empty.render())
            assert not s.query_one("#usage").display
            assert sum(s.query_one("#usage-series", Sparkline).data) == 0
