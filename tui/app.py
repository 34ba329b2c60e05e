"""The cluster console: bare ``llmgw`` opens it on the Nodes screen.

Every screen talks to gatewayd only through the ``AdminClient`` the app holds,
calling the same methods as the ``llmgw ctl`` commands (screens ≡ commands):
Nodes (n) as ``llmgw ctl nodes``, Models (m) as ``llmgw ctl models``, Replicas
(p) as ``llmgw ctl replicas``, Keys & tenancy (k) as ``llmgw ctl keys`` and
``llmgw ctl org|team|project``, Usage (u) as ``llmgw ctl usage``. Each screen
is a Textual mode: switching keeps the others open and live, so coming back
shows them current at once.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.paths import Paths
from tui.screens.keys import KeysScreen
from tui.screens.models import ModelsScreen
from tui.screens.nodes import NodesScreen
from tui.screens.replicas import ReplicasScreen
from tui.screens.usage import UsageScreen

ClientSource = AdminClient | Callable[[], AdminClient]


class LlmgwApp(App[LlmgwError | None]):
    """The console app.

    ``client`` is an ``AdminClient`` (tests point one at a test server) or a
    function that makes one. A function is called when the app loads, inside
    the event loop the app runs on: grpclib binds a channel to the loop current
    when it is made, so a client made before ``App.run()`` starts its loop could
    never connect. A client the app made is closed by the app; one it was given
    stays the caller's.

    If making the client fails, the app ends before it draws anything and its
    ``return_value`` is the ``LlmgwError`` (``run_console`` raises it).
    """

    TITLE = "llmgw"
    CSS_PATH = "styles.tcss"
    # One mode per screen; the app opens on the first.
    DEFAULT_MODE = "nodes"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "switch_mode('nodes')", "Nodes"),
        Binding("m", "switch_mode('models')", "Models"),
        Binding("p", "switch_mode('replicas')", "Replicas"),
        Binding("k", "switch_mode('keys')", "Keys"),
        Binding("u", "switch_mode('usage')", "Usage"),
        Binding("r", "refresh", "Refresh"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, client: ClientSource) -> None:
        super().__init__()
        self._make_client = client if callable(client) else None
        self._client: AdminClient | None = None if callable(client) else client
        # Screens are made when first shown, after on_load has made the client.
        self.add_mode("nodes", self.get_default_screen)
        self.add_mode("models", lambda: ModelsScreen(self.client))
        self.add_mode("replicas", lambda: ReplicasScreen(self.client))
        self.add_mode("keys", lambda: KeysScreen(self.client))
        self.add_mode("usage", lambda: UsageScreen(self.client))

    @property
    def client(self) -> AdminClient:
        if self._client is None:
            raise RuntimeError("the admin client is made when the app loads")
        return self._client

    def on_load(self) -> None:
        # Load comes before the terminal is taken over, so an error here leaves
        # the screen as it was and reaches the operator as a plain error line.
        if self._make_client is None:
            return
        try:
            self._client = self._make_client()
        except LlmgwError as e:
            self.exit(result=e, return_code=int(e.exit_code))

    def get_default_screen(self) -> Screen:
        return NodesScreen(self.client)

    def action_refresh(self) -> None:
        """Have the screen on top read its data again (screens that can define ``reload``)."""
        reload = getattr(self.screen, "reload", None)
        if callable(reload):
            reload()

    def on_unmount(self) -> None:
        if self._make_client is not None and self._client is not None:
            self._client.close()


def run_console(paths: Paths) -> None:
    """Open the console against the control plane configured under ``paths``.

    Raises the ``LlmgwError`` of a missing or broken server.yaml or admin
    token before anything is drawn.
    """
    app = LlmgwApp(partial(AdminClient.from_paths, paths))
    app.run()
    if isinstance(app.return_value, LlmgwError):
        raise app.return_value
