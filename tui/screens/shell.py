"""The console's frame around every screen: a header with the cluster's state, and tabs.

``ShellHeader`` shows "llmgw · <cluster>" with the cluster's state beside it
(the app's title and sub-title, kept current by the app), and under it one
tab per screen with the key that opens it; a click on a tab opens it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Static


@dataclass(frozen=True)
class ScreenEntry:
    mode: str
    key: str
    title: str
    # The ``llmgw ctl`` command that prints what the screen shows.
    command: str


SCREENS: tuple[ScreenEntry, ...] = (
    ScreenEntry("overview", "o", "Overview", "llmgw ctl status / nodes / models / warnings"),
    ScreenEntry("nodes", "n", "Nodes", "llmgw ctl nodes / engines / weights"),
    ScreenEntry("models", "m", "Models", "llmgw ctl models"),
    ScreenEntry("replicas", "p", "Replicas", "llmgw ctl replicas"),
    ScreenEntry("keys", "k", "Keys", "llmgw ctl keys / org / team / project"),
    ScreenEntry("usage", "u", "Usage", "llmgw ctl usage"),
    ScreenEntry("batches", "b", "Batches", "llmgw ctl batches"),
    ScreenEntry("mirror", "i", "Mirror", "llmgw ctl mirror list / du / peers list"),
    ScreenEntry("mcp", "j", "MCP", "llmgw ctl mcp list / grants"),
    ScreenEntry("settings", "w", "Settings", "llmgw ctl config get / history / diff"),
)


def tabs_markup(current: str, *, compact: bool = False, keys_only: tuple[str, ...] = ()) -> str:
    """One tab per screen, its key first; the current one marked. Clicking one opens it.

    ``compact`` drops the space after each tab but the current one's: eight
    tabs fit 80 columns that way, beside the palette's key (its words go).
    The tabs of ``keys_only`` (modes, see ``tight_tabs``) show their key alone.
    """
    parts = []
    for s in SCREENS:
        label = f" [b]{s.key}[/b]" if s.mode in keys_only else f" [b]{s.key}[/b] {s.title}"
        if s.mode == current:
            label = f"[reverse]{label} [/reverse]"
        elif not compact:
            label += " "
        parts.append(f"[@click=app.switch_mode('{s.mode}')]{label}[/]")
    return "".join(parts)


def tabs_width(*, compact: bool = False, keys_only: tuple[str, ...] = ()) -> int:
    """The cells ``tabs_markup`` takes on the screen."""
    return sum(
        (2 if s.mode in keys_only else len(s.title) + 3) + (0 if compact else 1) for s in SCREENS
    ) + (1 if compact else 0)


def tight_tabs(current: str, room: int) -> tuple[str, ...]:
    """The tabs that show their key alone so that compact tabs fit ``room`` cells: the
    last ones first, never the current one (nine tabs and the palette's key overflow
    80 columns by four cells; the MCP tab, last, gives them up)."""
    dropped: tuple[str, ...] = ()
    for s in reversed(SCREENS):
        if tabs_width(compact=True, keys_only=dropped) <= room:
            break
        if s.mode != current:
            dropped += (s.mode,)
    return dropped


class KeyFooter(Footer):
    """The footer of every cluster-console screen and dialog: its keys, compact.

    Compact, so that the busiest screen's keys and Quit fit 80 columns; the
    screens' own keys (o n m p k u) are on the header's tabs, not repeated here.
    """

    def __init__(self) -> None:
        # The palette's key is on the header's tab line instead (``PALETTE_HINT``).
        super().__init__(compact=True, show_command_palette=False)

    def compose(self) -> ComposeResult:
        # Textual's footer keys watch the footer's ``compact`` afresh at every
        # recompose (each time the keys are checked) and the watch outlives them:
        # the list grows without end and each new key scans it whole. Forget the
        # watches of keys that are gone before making new ones.
        watchers = getattr(self, "__watchers", None)
        if watchers:
            for entries in watchers.values():
                entries[:] = [(node, f) for node, f in entries if node.is_attached]
        yield from super().compose()


# Right of the tabs: the command palette, which lists every screen and action.
PALETTE_HINT = "[@click=app.command_palette][b]^p[/b] commands[/]"
PALETTE_HINT_CELLS = len("^p commands")
# Where even compact tabs leave no room for the words (80 columns, eight tabs): the key alone.
PALETTE_HINT_SHORT = "[@click=app.command_palette][b]^p[/b][/]"
PALETTE_HINT_SHORT_CELLS = len("^p")


class ShellHeader(Vertical):
    """The cluster's name and state on one line, the screens as tabs on the next."""

    def __init__(self, mode: str) -> None:
        super().__init__(id="shell-header")
        self._mode = mode

    def compose(self) -> ComposeResult:
        yield Static(id="shell-title")
        with Horizontal(id="shell-tab-line"):
            yield Static(tabs_markup(self._mode), id="shell-tabs")
            yield Static(PALETTE_HINT, id="shell-palette")

    def on_mount(self) -> None:
        self.watch(self.app, "title", self._retitle, init=False)
        self.watch(self.app, "sub_title", self._retitle)

    def on_resize(self) -> None:
        # What the tabs have: the line less its padding (1 each side) and the hint.
        room = self.size.width - 2 - PALETTE_HINT_CELLS
        compact = room < tabs_width()
        short = room < tabs_width(compact=True)
        keys_only = tight_tabs(self._mode, room + PALETTE_HINT_CELLS - PALETTE_HINT_SHORT_CELLS)
        self.query_one("#shell-tabs", Static).update(
            tabs_markup(self._mode, compact=compact, keys_only=keys_only if short else ())
        )
        self.query_one("#shell-palette", Static).update(
            PALETTE_HINT_SHORT if short else PALETTE_HINT
        )

    def _retitle(self, _: str = "") -> None:
        # The app's sub-title is the cluster's state, or what keeps it from being read.
        problem = bool(getattr(self.app, "cluster_problem", ""))
        line = Table.grid(expand=True)
        line.add_column(no_wrap=True)
        line.add_column(justify="right", no_wrap=True, overflow="ellipsis")
        state = Text(self.app.sub_title, style="bold red" if problem else "")
        line.add_row(Text(self.app.title, style="bold"), state)
        self.query_one("#shell-title", Static).update(line)
