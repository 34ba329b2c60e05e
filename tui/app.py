"""The cluster console: bare ``llmgw`` opens it on the Overview.

Every screen talks to gatewayd only through the ``AdminClient`` the app holds,
calling the same methods as the ``llmgw ctl`` commands (screens ≡ commands):
Overview (o) as ``llmgw ctl status``, ``nodes``, ``models`` and ``warnings``,
Nodes (n) as ``llmgw ctl nodes`` and ``engines``, Models (m) as ``llmgw ctl
models``, Replicas (p) as ``llmgw ctl replicas``, Keys & tenancy (k) as
``llmgw ctl keys`` and ``llmgw ctl org|team|project``, Usage (u) as ``llmgw ctl
usage``, Batches (b) as ``llmgw ctl batches``, Mirror (i) as ``llmgw ctl mirror``, MCP (j) as
``llmgw ctl mcp``, Settings (w) as ``llmgw ctl config``. Each screen is a Textual mode:
switching keeps the others open and live, so coming back shows them current
at once.

The app itself keeps a ``ClusterSummary`` current (the header's "3/3 nodes
ready · 2/2 models serving" and the Overview): it reads the cluster once,
then follows ``Watch`` — one watch for the whole console: the Nodes, Models
and Replicas screens listen to it (``listen``) rather than each decoding the
same events again. The command palette (ctrl+p) lists every screen and
the actions of the one shown; ctrl+t switches between a dark and a light theme.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from llmgw.admin_client import AdminClient
from llmgw.errors import AdminUnauthenticated, AdminUnreachable, LlmgwError
from llmgw.paths import Paths
from proto.llmgw.v1 import WatchEvent
from tui.screens.batches.batches import BatchesScreen
from tui.screens.cluster.cluster_feed import (
    SLOW_READ_EVERY_S,
    TOPICS,
    ClusterChanged,
    ClusterRead,
    CountersRead,
    FeedListener,
    read_cluster,
    read_counters,
)
from tui.screens.cluster.overview import OverviewScreen
from tui.screens.cluster.summary import ClusterSummary
from tui.screens.common import (
    WATCH_RETRY_FIRST_S,
    WATCH_RETRY_MAX_S,
    AdminFailed,
    describe,
    follow_watch,
)
from tui.screens.keys.keys import KeysScreen
from tui.screens.keys.usage import UsageScreen
from tui.screens.live import Flag
from tui.screens.mcp.mcp import McpScreen
from tui.screens.mirror.mirror import MirrorScreen
from tui.screens.models.models import ModelsScreen
from tui.screens.models.replicas import ReplicasScreen
from tui.screens.nodes.nodes import NodesScreen
from tui.screens.settings.settings import SettingsScreen
from tui.screens.shell import SCREENS

ClientSource = AdminClient | Callable[[], AdminClient]
DARK, LIGHT = "textual-dark", "textual-light"
# A burst of events (a thousand nodes' heartbeats) is drawn once per this.
REDRAW_S = 0.25
# The screens' keys share one place in the footer; the tabs name them.
SCREEN_KEYS = Binding.Group("Screens", compact=True)


class ClusterUnread(Message):
    """The cluster could not be read for the header and the Overview."""

    def __init__(self, error: LlmgwError, *, retry_in_s: float | None = None) -> None:
        super().__init__()
        self.error = error
        self.retry_in_s = retry_in_s


class LlmgwApp(App[LlmgwError | None]):
    """The console app.

    ``client`` is an ``AdminClient`` (tests point one at a test server) or a
    function that makes one. A function is called when the app loads, inside
    the event loop the app runs on: grpclib binds a channel to the loop current
    when it is made, so a client made before ``App.run()`` starts its loop could
    never connect. A client the app made is closed by the app; one it was given
    stays the caller's. ``first_screen`` is the mode it opens on; ``paths``, the
    control plane's files where the console runs on one (for Add node).

    If making the client fails, the app ends before it draws anything and its
    ``return_value`` is the ``LlmgwError`` (``run_console`` raises it).
    """

    TITLE = "llmgw"
    CSS_PATH = "styles.tcss"
    # One mode per screen; the app opens on the first.
    DEFAULT_MODE = "overview"
    BINDINGS: ClassVar[list[BindingType]] = [
        # The header's tabs name these keys; the footer leaves them out for the screen's own.
        *(
            Binding(s.key, f"switch_mode('{s.mode}')", s.title, group=SCREEN_KEYS, show=False)
            for s in SCREENS
        ),
        # Every screen is live; r is for after a refused token is sorted (in the palette).
        Binding("r", "refresh", "Refresh", show=False),
        # In the palette ("Dark or light theme"), not the footer: 80 columns go to the screen's keys.
        Binding("ctrl+t", "toggle_theme", "Theme", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self, client: ClientSource, *, first_screen: str = "overview", paths: Paths | None = None
    ) -> None:
        # Read by App.__init__: the mode the app opens on.
        self.DEFAULT_MODE = first_screen
        super().__init__()
        # This control plane's files (node add issues certificates from its CA); None
        # when the console was given only a client (the Add node dialog then says so).
        self.paths = paths
        self._make_client = client if callable(client) else None
        self._client: AdminClient | None = None if callable(client) else client
        self.summary = ClusterSummary()
        # What keeps the summary from being current, as one line ("" when nothing).
        self.cluster_problem = ""
        self._counters_due = False
        self._counters_read_at = 0.0
        self._redraw_due = False
        self._changed = Flag()
        # The screens following the app's watch (Nodes, Models, Replicas).
        self._listeners: list[FeedListener] = []
        self._overview: OverviewScreen | None = None
        # Screens are made when first shown, after on_load has made the client.
        self.add_mode("overview", self._make_overview)
        self.add_mode("nodes", lambda: NodesScreen(self.client))
        self.add_mode("models", lambda: ModelsScreen(self.client))
        self.add_mode("replicas", lambda: ReplicasScreen(self.client))
        self.add_mode("keys", lambda: KeysScreen(self.client))
        self.add_mode("usage", lambda: UsageScreen(self.client))
        self.add_mode("batches", lambda: BatchesScreen(self.client))
        self.add_mode("mirror", lambda: MirrorScreen(self.client))
        self.add_mode("mcp", lambda: McpScreen(self.client))
        self.add_mode("settings", lambda: SettingsScreen(self.client))

    @property
    def client(self) -> AdminClient:
        if self._client is None:
            raise RuntimeError("the admin client is made when the app loads")
        return self._client

    def _make_overview(self) -> OverviewScreen:
        self._overview = OverviewScreen(self.summary, self.client.address)
        return self._overview

    def on_load(self) -> None:
        # Load comes before the terminal is taken over, so an error here leaves
        # the screen as it was and reaches the operator as a plain error line.
        if self._make_client is None:
            return
        try:
            self._client = self._make_client()
        except LlmgwError as e:
            self.exit(result=e, return_code=int(e.exit_code))

    def on_mount(self) -> None:
        if self._client is not None:
            self.sub_title = self.summary.state_line()
            self.follow_cluster()

    def get_default_screen(self) -> Screen:
        return self._make_overview()

    # -- actions -------------------------------------------------------------------

    def action_refresh(self) -> None:
        """Have the screen on top read its data again (screens that can define ``reload``)."""
        reload = getattr(self.screen, "reload", None)
        if callable(reload):
            reload()

    def action_toggle_theme(self) -> None:
        self.theme = LIGHT if self.current_theme.dark else DARK

    def reload_cluster(self) -> None:
        """Read the whole cluster again and reopen the watch (r on the Overview, Nodes,
        Models and Replicas: they follow this one watch)."""
        self.follow_cluster()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for s in SCREENS:
            yield SystemCommand(
                f"{s.title} screen",
                f"Open it ({s.key}); it shows what {s.command} prints",
                partial(self.switch_mode, s.mode),
            )
        # The actions of the screen shown, as its keys do them.
        for active in screen.active_bindings.values():
            if active.node is self or not active.enabled or not active.binding.show:
                continue
            yield SystemCommand(
                f"{active.binding.description} ({self.get_key_display(active.binding)})",
                f"On the {screen.__class__.__name__.removesuffix('Screen')} screen",
                partial(self.run_action, active.binding.action, active.node),
            )
        yield SystemCommand("Refresh", "Read this screen's data again (r)", self.action_refresh)
        yield SystemCommand(
            "Dark or light theme", "Switch between them (ctrl+t)", self.action_toggle_theme
        )
        yield from super().get_system_commands(screen)

    # -- workers: following the cluster for the header and the Overview -------------

    @work(exclusive=True, exit_on_error=False, group="cluster-feed")
    async def follow_cluster(self) -> None:
        delay_s = WATCH_RETRY_FIRST_S
        while True:
            try:
                read = await read_cluster(self.client)
                break
            except AdminUnreachable as e:
                self._tell_failed(e, delay_s)
                self.post_message(ClusterUnread(e, retry_in_s=delay_s))
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, WATCH_RETRY_MAX_S)
            except LlmgwError as e:
                # Refused (a token, an older gatewayd): the same call would be refused again.
                self._tell_failed(e, None)
                self.post_message(ClusterUnread(e))
                return
        self.post_message(self._load_summary(read))

        async def resync() -> Message:
            return self._load_summary(await read_cluster(self.client))

        async def on_event(event: WatchEvent) -> Message | None:
            # Recorded here, in the order events come; one message at a time draws them.
            if not self.summary.loaded:
                return None
            self.summary.apply(event)
            for listener in self._listeners:
                listener.feed_event(event)
            return ClusterChanged(event) if self._changed.up() else None

        def failed(error: LlmgwError, retry_in_s: float | None) -> Message:
            self._tell_failed(error, retry_in_s)
            return ClusterUnread(error, retry_in_s=retry_in_s)

        await follow_watch(
            self, self.client, TOPICS, resync=resync, on_event=on_event, failed=failed
        )

    # -- the one watch, shared with the screens -------------------------------------

    def listen(self, listener: FeedListener) -> bool:
        """Keep ``listener`` (a screen) live from the app's watch; True when the cluster
        was read already (the screen draws from ``summary`` at once, no call made)."""
        self._listeners.append(listener)
        return self.summary.loaded

    def _tell_failed(self, error: LlmgwError, retry_in_s: float | None) -> None:
        for listener in self._listeners:
            listener.feed_failed(error, retry_in_s)

    @work(exclusive=True, exit_on_error=False, group="cluster-counters")
    async def read_counters(self, delay_s: float) -> None:
        try:
            self.post_message(await read_counters(self.client, delay_s))
        except LlmgwError:
            self._counters_due = False  # the watch says so if gatewayd went away

    # -- message handlers ----------------------------------------------------------------

    def _load_summary(self, read: ClusterRead) -> ClusterRead:
        # Loaded before the message goes, so that no event that follows is undone.
        self.summary.load(
            read.status,
            list(read.nodes.nodes),
            list(read.models.models),
            list(read.replicas.replicas),
            list(read.engines.engines),
            list(read.warnings.warnings),
            now=time.monotonic(),
        )
        for listener in self._listeners:
            listener.feed_read(read)
        return read

    def on_cluster_read(self, message: ClusterRead) -> None:
        self._counters_read_at = time.monotonic()
        self._show(problem="")

    def on_cluster_changed(self, message: ClusterChanged) -> None:
        self._changed.down()
        if not self.summary.loaded:
            return
        # What no event carries (the counters, warnings, engines) is read again
        # at most every few seconds: events are the clock, not a timer.
        if not self._counters_due:
            self._counters_due = True
            wait_s = self._counters_read_at + SLOW_READ_EVERY_S - time.monotonic()
            self.read_counters(max(wait_s, 0.0))
        self.cluster_problem = ""  # an event is gatewayd answering
        if not self._redraw_due:
            self._redraw_due = True
            self.set_timer(REDRAW_S, self._redraw)

    def _redraw(self) -> None:
        self._redraw_due = False
        self._show(problem=None)

    def on_counters_read(self, message: CountersRead) -> None:
        now = time.monotonic()
        self._counters_due = False
        self._counters_read_at = now
        self.summary.sample(message.status, now=now)
        self.summary.warnings = list(message.warnings.warnings)
        self.summary.engines = list(message.engines.engines)
        self._show(problem="")

    def on_cluster_unread(self, message: ClusterUnread) -> None:
        self._show(problem=describe(message.error, message.retry_in_s))

    def on_admin_failed(self, message: AdminFailed) -> None:
        # Any screen's failure reaches here too: only gatewayd not answering, or
        # refusing the token, is news for the header; a refused action is not.
        if isinstance(message.error, AdminUnreachable | AdminUnauthenticated):
            self._show(problem=describe(message.error, message.retry_in_s))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.node is self:
            self._show(problem=f"internal error in {event.worker.name}: {event.worker.error!r}")
            self.log.error(event.worker.error)

    def _show(self, *, problem: str | None) -> None:
        if problem is not None:
            self.cluster_problem = problem
        name = self.summary.cluster_name
        self.title = f"llmgw · {name}" if name else "llmgw"
        self.sub_title = self.cluster_problem or self.summary.state_line()
        if self._overview is not None:
            self._overview.show(self.cluster_problem)

    def on_unmount(self) -> None:
        if self._make_client is not None and self._client is not None:
            self._client.close()


def run_console(paths: Paths) -> None:
    """Open the console against the control plane configured under ``paths``.

    Raises the ``LlmgwError`` of a missing or broken server.yaml or admin
    token before anything is drawn.
    """
    app = LlmgwApp(partial(AdminClient.from_paths, paths), paths=paths)
    app.run()
    if isinstance(app.return_value, LlmgwError):
        raise app.return_value
