"""Drawing a live screen's changes together, and only while it is shown.

A thousand nodes heartbeating and hundreds of models changing mean hundreds
of ``Watch`` events a second. Each event only records the new view (cheap);
the rows, counts and panes are drawn at most every ``DRAW_S`` while the screen
is shown, and once when it is shown again after being hidden — never for a
screen nobody is looking at. Key presses are answered between draws.

``LiveRows`` keeps a ``DataTable``'s rows for a dict of views and changes only
the rows whose views changed since the last draw, and only the cells that
differ from those shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable, Static

V = TypeVar("V")
Cells = Sequence[str | Text]

# While shown: changes appear within this, however many arrive meanwhile.
DRAW_S = 0.25


class DrawLater:
    """A Screen mixin: ``draw_later()`` after recording changes; ``draw()`` draws them."""

    _draw_due = False
    _draw_stale = False
    _bindings_for: object = None

    def draw(self) -> None:  # pragma: no cover - every screen using the mixin defines it
        raise NotImplementedError

    def draw_later(self) -> None:
        """Draw within ``DRAW_S`` if the screen is shown, else when it is shown again."""
        if not self.is_current:  # type: ignore[attr-defined]
            self._draw_stale = True
            return
        if not self._draw_due:
            self._draw_due = True
            self.set_timer(DRAW_S, self._draw_now)  # type: ignore[attr-defined]

    def draw_now(self) -> None:
        """Draw at once (after the operator's own action, whose result they wait for)."""
        self._draw_now()

    def _draw_now(self) -> None:
        self._draw_due = False
        self._draw_stale = False
        if self.is_mounted:  # type: ignore[attr-defined]
            self.draw()

    def on_screen_resume(self) -> None:
        # Back in front (another screen, or a dialog closed): what is waiting, at once.
        if self._draw_stale or self._draw_due:
            self._draw_now()

    def bindings_for(self, selection: object) -> None:
        """Have the footer's keys checked again if what they act on changed.

        ``selection``: what the screen's ``check_action`` reads (the selected
        row and its state). Not at every draw: each check rebuilds the footer.
        """
        if selection != self._bindings_for:
            self._bindings_for = selection
            self.refresh_bindings()  # type: ignore[attr-defined]


class Rereads:
    """A Screen mixin for a screen that reads its whole list: it defines ``load()``.

    It reads again on the r key (``reload``), every ``reread_every(seconds)``
    while shown (a screen in another mode keeps its last answer), and at once
    when it comes back from another mode — not when one of its own dialogs
    closes: the action the dialog led to reads again when it is answered.
    """

    _under_dialog = False

    def load(self) -> None:  # pragma: no cover - every screen using the mixin defines it
        raise NotImplementedError

    def reread_every(self, seconds: float) -> None:
        self.set_interval(seconds, self._reread_tick)  # type: ignore[attr-defined]

    def on_screen_suspend(self) -> None:
        # A dialog of this screen over it, or another mode in its place?
        self._under_dialog = self in self.app.screen_stack  # type: ignore[attr-defined]

    def on_screen_resume(self) -> None:
        if not self._under_dialog:
            self.load()
        self._under_dialog = False

    def reload(self) -> None:
        """Read it all again now (the r key)."""
        self.load()

    def _reread_tick(self) -> None:
        if self.is_current:  # type: ignore[attr-defined]
            self.load()


class Flag:
    """At most one "something changed" message waiting for a screen at a time.

    A worker following ``Watch`` records each event's view where the screen
    keeps it and posts one message only if none is waiting: a thousand events
    a second never queue up ahead of a key press.
    """

    __slots__ = ("_up",)

    def __init__(self) -> None:
        self._up = False

    def up(self) -> bool:
        """Raise it; True when it was down (post the message then)."""
        was, self._up = self._up, True
        return not was

    def down(self) -> None:
        """The message arrived: the next change posts again."""
        self._up = False


class LiveRows(Generic[V]):
    """A table's rows, keyed like the views, changed together at each draw."""

    def __init__(self, columns: Sequence[str], cells: Callable[[V], Cells]) -> None:
        self._columns = tuple(columns)
        self._cells = cells
        self.views: dict[str, V] = {}
        self._shown: dict[str, tuple] = {}
        self._pending: set[str] = set()
        self._reload = False

    def replace(self, views: Iterable[tuple[str, V]]) -> None:
        """A whole list read: every row is drawn again at the next flush."""
        self.views = dict(views)
        self._pending.clear()
        self._reload = True

    def load(self, table: DataTable, views: Iterable[tuple[str, V]]) -> None:
        """Every row again (a whole list read), keeping the cursor on its row."""
        selected = selected_key(table)
        self.views = dict(views)
        self._pending.clear()
        self._shown = {}
        table.clear()
        for key, view in self.views.items():
            cells = tuple(self._cells(view))
            self._shown[key] = cells
            table.add_row(*cells, key=key)
        if selected in self.views:
            table.move_cursor(row=table.get_row_index(selected))

    def put(self, key: str, view: V) -> None:
        self.views[key] = view
        self._pending.add(key)

    def drop(self, key: str) -> None:
        self.views.pop(key, None)
        self._pending.add(key)

    def flush(self, table: DataTable) -> bool:
        """Change the rows whose views changed; True when any row did."""
        if self._reload:
            self._reload = False
            self.load(table, list(self.views.items()))
            return True
        changed = False
        for key in self._pending:
            view = self.views.get(key)
            shown = self._shown.get(key)
            if view is None:
                if shown is not None:
                    del self._shown[key]
                    table.remove_row(key)
                    changed = True
                continue
            cells = tuple(self._cells(view))
            if shown is None:
                table.add_row(*cells, key=key)
            elif cells != shown:
                for column, old, new in zip(self._columns, shown, cells, strict=True):
                    if old != new:
                        table.update_cell(key, column, new, update_width=_wider(table, column, new))
            else:
                continue
            self._shown[key] = cells
            changed = True
        self._pending.clear()
        return changed


def show_text(static: Static, text: str | Text) -> None:
    """``static.update(text)`` unless it shows that already: an update lays the whole
    screen out again, and a live screen's counts are mostly what they were."""
    if static.content != text:
        static.update(text)


def _wider(table: DataTable, column: str, cell: str | Text) -> bool:
    """Whether ``cell`` needs its column wider than it is.

    Columns grow as cells do and keep their width while live: a narrower cell
    would have the table measure the whole column again (every row, at every
    change), and a width that jumps about is no help to the eye either. A
    whole list read fits them again.
    """
    width = cell.cell_len if isinstance(cell, Text) else cell_len(cell)
    found = table.columns.get(column)  # type: ignore[call-overload]
    return found is None or width > found.content_width


def selected_key(table: DataTable) -> str | None:
    """The key of the row under the cursor (None for an empty table)."""
    if not table.row_count:
        return None
    return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
