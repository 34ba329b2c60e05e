"""The Usage screen: what the gateway served, summed per group, and requests over time.

It asks the same ``AdminClient.usage()`` as ``llmgw ctl usage --by … --from …``
for the period chosen (the last hour, 24 hours, 7 or 30 days, ending now) and
the grouping chosen (project, model, project and model, key), and draws each
group with the command's ``usage_cells``; the reply's ``series`` (requests per
step over the period) is the sparkline under the table.

``t`` and ``g`` step through the periods and groupings (the selectors at the
top do the same with the mouse). Usage is written in batches about once a
second and announced by no watch, so the screen asks again every few seconds
while it is shown, on every change of period or grouping, and on r.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Label, Select, Sparkline, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.usagefmt import (
    GROUPINGS,
    RANGES,
    USAGE_COLUMNS,
    dimension_headings,
    period,
    span_text,
    step_text,
    usage_cells,
)
from proto.llmgw.v1 import UsageReply
from tui.screens.common import AdminFailed, describe, show_worker_error
from tui.screens.shell import KeyFooter, ShellHeader

# 5 s: a request shows within one usage flush (1 s) and one refresh, without a
# screen left open all day asking gatewayd more than once every few seconds.
REFRESH_S = 5.0
DEFAULT_RANGE = "24h"
DEFAULT_GROUPING = "project"


class UsageLoaded(Message):
    """``usage`` answered for a period (``RANGES``) and a grouping (``GROUPINGS``)."""

    def __init__(self, reply: UsageReply, range_name: str, grouping: str, from_: str, to: str):
        super().__init__()
        self.reply = reply
        self.range_name = range_name
        self.grouping = grouping
        self.from_ = from_
        self.to = to


def _right(cell: str | Text) -> Text:
    """Numbers line up on the right, as in the command's table."""
    text = cell.copy() if isinstance(cell, Text) else Text(cell)
    text.justify = "right"
    return text


def _next(options: dict, current: str) -> str:
    names = list(options)
    return names[(names.index(current) + 1) % len(names)]


class UsageScreen(Screen[None]):
    """Usage sums in a table, requests over the period in a sparkline, refreshed while shown."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "next_range", "Period"),
        Binding("g", "next_grouping", "Group by"),
    ]

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._columns: tuple[str, ...] | None = None
        # The last answer; what was asked for it (by, from, to); and the
        # selectors' choices it answers (period, grouping).
        self.reply: UsageReply | None = None
        self.asked: tuple[tuple[str, ...], str, str] | None = None
        self.shown: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        yield ShellHeader("usage")
        yield Static(f"Reading usage from {self._client.address}…", id="status")
        with Horizontal(id="usage-bar"):
            yield Label("Period")
            yield Select(
                [(label, name) for name, (label, _) in RANGES.items()],
                value=DEFAULT_RANGE,
                allow_blank=False,
                id="usage-range",
            )
            yield Label("Group by")
            yield Select(
                [(label, name) for name, (label, _) in GROUPINGS.items()],
                value=DEFAULT_GROUPING,
                allow_blank=False,
                id="usage-by",
            )
            yield Static(id="usage-span")
        yield DataTable(id="usage", cursor_type="row", zebra_stripes=True)
        yield Static(id="usage-empty")
        yield Static(id="usage-series-label")
        yield Sparkline([], summary_function=max, id="usage-series")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#usage-empty").display = False
        self.query_one("#usage", DataTable).focus()
        self.set_interval(REFRESH_S, self._tick)

    def on_screen_resume(self) -> None:
        self.load()

    def reload(self) -> None:
        """Ask again now (the r key)."""
        self.load()

    def _tick(self) -> None:
        # Only while shown: a screen in another mode keeps its last answer.
        if self.is_current:
            self.load()

    # -- the selectors -----------------------------------------------------------

    @property
    def range_name(self) -> str:
        return str(self.query_one("#usage-range", Select).value)

    @property
    def grouping(self) -> str:
        return str(self.query_one("#usage-by", Select).value)

    def action_next_range(self) -> None:
        self.query_one("#usage-range", Select).value = _next(RANGES, self.range_name)

    def action_next_grouping(self) -> None:
        self.query_one("#usage-by", Select).value = _next(GROUPINGS, self.grouping)

    def on_select_changed(self, event: Select.Changed) -> None:
        self.load()

    def load(self) -> None:
        self.ask(self.range_name, self.grouping)

    # -- the worker: the only code here that talks to gatewayd -------------------

    @work(exclusive=True, exit_on_error=False, group="usage-load")
    async def ask(self, range_name: str, grouping: str) -> None:
        by = GROUPINGS[grouping][1]
        from_, to = period(RANGES[range_name][1])
        try:
            reply = await self._client.usage(list(by), from_=from_, to=to)
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(UsageLoaded(reply, range_name, grouping, from_, to))

    # -- message handlers: widgets only ----------------------------------------

    def on_usage_loaded(self, message: UsageLoaded) -> None:
        reply, by = message.reply, GROUPINGS[message.grouping][1]
        self.reply, self.asked = reply, (by, message.from_, message.to)
        self.shown = (message.range_name, message.grouping)
        table = self.query_one("#usage", DataTable)
        selected = self._selected_row()
        if self._columns != by:
            table.clear(columns=True)
            for heading in (*dimension_headings(by), *USAGE_COLUMNS):
                table.add_column(heading, key=heading.lower().replace(" ", "_"))
            self._columns = by
        else:
            table.clear()
        for g in reply.groups:
            key = "\x1f".join(g.group.get(d, "") for d in by)
            cells = usage_cells(g, by)
            table.add_row(*cells[: len(by)], *(_right(c) for c in cells[len(by) :]), key=key)
            if key == selected:
                table.move_cursor(row=table.row_count - 1)
        label = RANGES[message.range_name][0]
        self.query_one("#usage-span", Static).update(span_text(reply))
        empty = self.query_one("#usage-empty", Static)
        empty.update(f"No requests in the {label}.")
        empty.display = not reply.groups
        table.display = bool(reply.groups)
        self.query_one("#usage-series", Sparkline).data = list(reply.series)
        total = sum(reply.series)
        self.query_one("#usage-series-label", Static).update(
            f"Requests per {step_text(reply.series_step_s)} over the {label}: {total:,} in all"
        )
        status = self.query_one("#status", Static)
        status.update(
            f"Usage by {GROUPINGS[message.grouping][0]}: {len(reply.groups)} groups"
            f" · from {self._client.address} · every {REFRESH_S:g} s"
        )
        status.set_class(False, "-error")

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def _selected_row(self) -> str | None:
        table = self.query_one("#usage", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
