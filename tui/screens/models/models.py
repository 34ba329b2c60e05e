"""The Models screen: the catalog, each model's state and readiness, live — ``llmgw ctl models``.

Its rows are the same ``list_models()`` reply the command prints (read by the
app with the rest of the cluster), drawn with the same cell helpers
(``llmgw.present.modelfmt``). The app's one admin ``Watch`` brings "models" (a model
added, changed, removed) and "replicas": readiness is counted from replicas, and gatewayd announces a replica
becoming ready on "replicas" only, so a replica's change has its model read
again (``get_model``, as ``llmgw ctl model show``) and READY goes 0/1 → 1/1 live.

On the selected row: ``s`` scales, to N or MIN..MAX (``scale_model``, as ``llmgw ctl model scale``),
``d`` removes after asking (``remove_model``, ``llmgw ctl model rm``), ``e``
explains its placement (``explain_placement``, ``llmgw ctl explain-placement``), ``c``
shows what its replicas hold and sets the cores they reserve (``llmgw ctl model resources``);
``a`` opens the serve dialog (``llmgw ctl model plan`` / ``model serve``).

Only workers talk to gatewayd; they post past-tense messages whose handlers
touch the widgets.
"""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Input, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError, NotFoundError
from llmgw.present.modelfmt import (
    MODEL_COLUMNS,
    NO_MODELS,
    REASON_COLUMNS,
    model_cells,
    placement_summary,
    removed_text,
)
from proto.llmgw.v1 import (
    ListModelsReply,
    ModelView,
    PlacementReply,
    RemoveModelReply,
    WatchEvent,
)
from tui.screens.cluster.cluster_feed import ClusterRead
from tui.screens.common import AdminFailed, describe, show_worker_error
from tui.screens.live import DrawLater, Flag, LiveRows, selected_key, show_text
from tui.screens.models.resources import ResourcesDialog
from tui.screens.models.serve import ServeDialog
from tui.screens.shell import KeyFooter, ShellHeader

log = logging.getLogger(__name__)

# DataTable column keys: the command's headings, lower case ("model", "ready", …).
COLUMN_KEYS = tuple(c.lower() for c in MODEL_COLUMNS)
# The most replicas a model may ask for (the catalog's own bound).
MAX_REPLICAS = 1000
# Replicas' changes re-read their models at most this often.
REREAD_S = 0.25


class ModelsLoaded(Message):
    """The whole catalog arrived (``list_models``)."""

    def __init__(self, reply: ListModelsReply) -> None:
        super().__init__()
        self.reply = reply


class ModelsChanged(Message):
    """Watch events were recorded: draw them."""


class ModelScaled(Message):
    """``scale_model`` answered with the model as it is now."""

    def __init__(self, view: ModelView) -> None:
        super().__init__()
        self.view = view


class ModelReserved(Message):
    """``set_model_resources`` answered with the model as it is now."""

    def __init__(self, view: ModelView, cores: int) -> None:
        super().__init__()
        self.view = view
        self.cores = cores


class ModelRemoved(Message):
    """``remove_model`` answered: the model is gone, its replicas are stopping."""

    def __init__(self, reply: RemoveModelReply) -> None:
        super().__init__()
        self.reply = reply


class PlacementExplained(Message):
    """``explain_placement`` answered."""

    def __init__(self, reply: PlacementReply) -> None:
        super().__init__()
        self.reply = reply


# -- dialogs -----------------------------------------------------------------------


class ScaleDialog(ModalScreen[tuple[int, int] | None]):
    """Asks how many replicas a model should run: ``N``, or ``MIN..MAX`` for the load to
    decide between (``0..2`` starts it on its first request). Dismissed with (min, max),
    or None on Escape."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, view: ModelView) -> None:
        super().__init__()
        self.model_name = view.spec.name
        self._now = view.replicas_desired
        low, high = view.spec.replicas_min, view.spec.replicas_max
        self._bounds = str(low) if low == high else f"{low}..{high}"

    def compose(self) -> ComposeResult:
        with Vertical(id="scale-box", classes="dialog"):
            yield Static(
                f"How many replicas of {self.model_name}? N, or MIN..MAX to follow its load "
                f"(now {self._now}, asked for {self._bounds})"
            )
            yield Input(self._bounds, id="scale-replicas")
            yield Static("Enter scales · Esc cancels", id="scale-status", classes="dialog-status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#scale-box").border_title = f"Scale {self.model_name}"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        bounds = parse_bounds(event.value)
        if isinstance(bounds, str):
            status = self.query_one("#scale-status", Static)
            status.update(bounds)
            status.set_class(True, "-error")
            return
        self.dismiss(bounds)

    def action_cancel(self) -> None:
        self.dismiss(None)


def parse_bounds(text: str) -> tuple[int, int] | str:
    """``N`` or ``MIN..MAX`` as (min, max), or what is wrong with it in words."""
    text = text.strip()
    low, sep, high = text.partition("..")
    parts = [low.strip(), high.strip()] if sep else [low.strip()]
    if not all(p.isdigit() and int(p) <= MAX_REPLICAS for p in parts):
        return f"replicas: N or MIN..MAX, whole numbers from 0 to {MAX_REPLICAS}, not {text!r}"
    lo, hi = int(parts[0]), int(parts[-1])
    if hi < lo:
        return f"max ({hi}) is below min ({lo})"
    return lo, hi


class ConfirmRemove(ModalScreen[bool]):
    """Asks before a model is removed (its replicas are stopped); y or the button confirms."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "confirm", "Remove"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, view: ModelView) -> None:
        super().__init__()
        self.model_name = view.spec.name
        self._replicas = view.replicas_desired

    def compose(self) -> ComposeResult:
        with Vertical(id="remove-box", classes="dialog"):
            yield Static(
                f"Remove {self.model_name} from the catalog? Its replicas "
                f"({self._replicas} asked for) are stopped; requests for it are refused."
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Remove", variant="error", id="remove-confirm")
                yield Button("Cancel", id="remove-cancel")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#remove-box").border_title = f"Remove {self.model_name}"
        # The safe answer has the focus: Enter alone removes nothing.
        self.query_one("#remove-cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "remove-confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class ExplainPlacement(ModalScreen[None]):
    """Where the model goes or why it goes nowhere, and every node's reason; Escape closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss", "Close")]

    def __init__(self, client: AdminClient, name: str) -> None:
        super().__init__()
        self._client = client
        self.model_name = name

    def compose(self) -> ComposeResult:
        with Vertical(id="explain-box", classes="dialog"):
            yield Static(f"Asking gatewayd about {self.model_name}…", id="explain-summary")
            reasons: DataTable = DataTable(id="explain-reasons", cursor_type="row")
            for heading in REASON_COLUMNS:
                reasons.add_column(heading, key=heading.lower().replace(" ", "_"))
            yield reasons
            yield Static("Esc closes · r asks again", id="explain-status", classes="dialog-status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#explain-box").border_title = f"Placement of {self.model_name}"
        self.reload()

    def reload(self) -> None:
        self.explain()

    @work(exclusive=True, exit_on_error=False, group="explain")
    async def explain(self) -> None:
        try:
            reply = await self._client.explain_placement(self.model_name)
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(PlacementExplained(reply))

    def on_placement_explained(self, message: PlacementExplained) -> None:
        reply = message.reply
        # gatewayd's own lines when it sends them; the command's summary otherwise.
        summary = Text(reply.explanation) if reply.explanation else placement_summary(reply)
        self.query_one("#explain-summary", Static).update(summary)
        reasons = self.query_one("#explain-reasons", DataTable)
        reasons.clear()
        for n in reply.reasons:
            reasons.add_row(n.node_id, n.reason, key=n.node_id)
        reasons.display = bool(reply.reasons)
        status = self.query_one("#explain-status", Static)
        status.update("Esc closes · r asks again")
        status.set_class(False, "-error")

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#explain-status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#explain-status", Static), event)


# -- the screen ------------------------------------------------------------------


class ModelsScreen(DrawLater, Screen[None]):
    """Every model in a table keyed by name, kept current by the admin ``Watch``.

    Events only record the new views; rows and counts are drawn together
    (``DrawLater``). A replica's change re-reads its model (``get_model``), at
    most once per ``REREAD_S`` for however many of its replicas changed.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "serve", "Serve"),
        Binding("s", "scale", "Scale"),
        Binding("d,delete", "remove", "Remove"),
        Binding("e", "explain", "Explain"),
        Binding("c", "resources", "Cores"),
    ]
    # The actions that need a selected model: shown dimmed while there is none.
    ON_A_MODEL: ClassVar[frozenset[str]] = frozenset({"scale", "remove", "explain", "resources"})

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._rows: LiveRows[ModelView] = LiveRows(COLUMN_KEYS, model_cells)
        self._changed = Flag()
        # Models whose replicas changed since they were last read.
        self._stale: set[str] = set()
        self._rereading = False
        self._model_of: dict[str, str] = {}
        # "No models yet" only once gatewayd said so, never while it cannot be reached.
        self._loaded = False

    def compose(self) -> ComposeResult:
        yield ShellHeader("models")
        yield Static(f"Reading models from {self._client.address}…", id="status")
        table: DataTable = DataTable(id="models", cursor_type="row", zebra_stripes=True)
        for heading, key in zip(MODEL_COLUMNS, COLUMN_KEYS, strict=True):
            table.add_column(heading, key=key)
        yield table
        yield Static(f"{NO_MODELS} (or press a here)", id="empty")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#empty").display = False
        # The app reads the cluster and follows its watch once for every screen.
        if self.app.listen(self):  # type: ignore[attr-defined]
            s = self.app.summary  # type: ignore[attr-defined]
            self._rows.replace(s.models.items())
            self._model_of = {r.replica_id: r.model for r in s.replicas.values()}
            self._loaded = True
            self.draw()  # mounted: its widgets are there

    def reload(self) -> None:
        """Read the cluster again and reopen the watch (the r key)."""
        self.app.reload_cluster()  # type: ignore[attr-defined]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.ON_A_MODEL and self.selected_model() is None:
            return None
        return True

    # -- actions -----------------------------------------------------------------

    def action_serve(self) -> None:
        self.app.push_screen(ServeDialog(self._client), self._served)

    def action_scale(self) -> None:
        view = self.selected_model()
        if view is None:
            return
        name = view.spec.name

        def scale_to(bounds: tuple[int, int] | None) -> None:
            if bounds is not None:
                self.run_scale(name, *bounds)

        self.app.push_screen(ScaleDialog(view), scale_to)

    def action_remove(self) -> None:
        view = self.selected_model()
        if view is None:
            return
        name = view.spec.name

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_remove(name)

        self.app.push_screen(ConfirmRemove(view), confirmed)

    def action_explain(self) -> None:
        view = self.selected_model()
        if view is not None:
            self.app.push_screen(ExplainPlacement(self._client, view.spec.name))

    def action_resources(self) -> None:
        view = self.selected_model()
        if view is None or view.spec is None:
            return
        name = view.spec.name
        cores = view.spec.profiles[0].cores if view.spec.profiles else 0

        def reserve(chosen: int | None) -> None:
            if chosen is not None:
                self.run_resources(name, chosen)

        self.app.push_screen(ResourcesDialog(self._client, name, cores), reserve)

    def _served(self, view: ModelView | None) -> None:
        if view is None:
            return
        self._put(view)
        self.query_one("#models", DataTable).move_cursor(
            row=self.query_one("#models", DataTable).get_row_index(view.spec.name)
        )
        self.notify(f"Serving {view.spec.name}. Watch it start: Replicas (p).")

    # -- workers: the only code here that talks to gatewayd --------------------

    # -- the app's watch: recorded here, in the order things happen; drawn by messages --

    def feed_read(self, read: ClusterRead) -> None:
        self._rows.replace((m.spec.name, m) for m in read.models.models)
        self._model_of = {r.replica_id: r.model for r in read.replicas.replicas}
        self.post_message(ModelsLoaded(read.models))

    def feed_event(self, event: WatchEvent) -> None:
        if event.topic == "models":
            self._record(event.key, event.model)
            if self._changed.up():
                self.post_message(ModelsChanged())
            return
        if event.topic != "replicas":
            return
        # Which model each replica serves: a removed replica's event carries no view.
        if event.replica is not None:
            name = self._model_of[event.key] = event.replica.model
        else:
            name = self._model_of.pop(event.key, "")
        if name:
            self._stale.add(name)
            if not self._rereading:
                self._rereading = True
                self.reread_models()

    def feed_failed(self, error: LlmgwError, retry_in_s: float | None) -> None:
        self.post_message(AdminFailed(error, retry_in_s=retry_in_s))

    # -- workers: the only code here that talks to gatewayd --------------------

    @work(exclusive=True, exit_on_error=False, group="models-reread")
    async def reread_models(self) -> None:
        # Replicas change in bursts (a rollout, a node lost): gather them first.
        try:
            while self._stale:
                await asyncio.sleep(REREAD_S)
                names, self._stale = self._stale, set()
                for name in sorted(names):
                    try:
                        self._record(name, await self._client.get_model(name))
                        if self._changed.up():
                            self.post_message(ModelsChanged())
                    except NotFoundError:
                        pass  # removed: its own "models" event drops the row
                    except LlmgwError as e:
                        self.post_message(AdminFailed(e))
                        return
        finally:
            self._rereading = False

    @work(exclusive=True, exit_on_error=False, group="models-action")
    async def run_scale(self, name: str, low: int, high: int) -> None:
        try:
            view = await self._client.scale_model(name, low=low, high=high)
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(ModelScaled(view))

    @work(exclusive=True, exit_on_error=False, group="models-action")
    async def run_resources(self, name: str, cores: int) -> None:
        try:
            view = await self._client.set_model_resources(name, cores=cores)
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(ModelReserved(view, cores))

    @work(exclusive=True, exit_on_error=False, group="models-action")
    async def run_remove(self, name: str) -> None:
        try:
            reply = await self._client.remove_model(name)
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(ModelRemoved(reply))

    # -- message handlers: widgets only ----------------------------------------

    @property
    def _views(self) -> dict[str, ModelView]:
        return self._rows.views

    def _record(self, name: str, view: ModelView | None) -> None:
        if view is None:
            self._rows.drop(name)
        else:
            self._rows.put(name, view)

    def on_models_loaded(self, message: ModelsLoaded) -> None:
        self._loaded = True
        self.draw_now()

    def on_models_changed(self, message: ModelsChanged) -> None:
        self._changed.down()
        self.draw_later()

    def draw(self) -> None:
        self._rows.flush(self.query_one("#models", DataTable))
        if self._loaded:
            self._show_counts()

    def on_model_scaled(self, message: ModelScaled) -> None:
        self._put(message.view)
        view = message.view
        self.notify(f"Scaling {view.spec.name} to {view.replicas_desired} replicas.")

    def on_model_reserved(self, message: ModelReserved) -> None:
        self._put(message.view)
        self.notify(
            f"{message.view.spec.name}: {message.cores} cores per CPU replica; "
            "replicas restart one at a time to take it."
        )

    def on_model_removed(self, message: ModelRemoved) -> None:
        self._drop(message.reply.name)
        self.notify(removed_text(message.reply))

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_bindings()

    # -- rows ----------------------------------------------------------------------

    def _put(self, view: ModelView) -> None:
        """A model the operator's own action changed: drawn at once."""
        self._rows.put(view.spec.name, view)
        self.draw_now()

    def _drop(self, name: str) -> None:
        self._rows.drop(name)
        self.draw_now()

    def _selected_name(self) -> str | None:
        table = next(self.query("#models").results(DataTable), None)  # none before compose
        return None if table is None else selected_key(table)

    def selected_model(self) -> ModelView | None:
        """The model under the cursor, as last read."""
        name = self._selected_name()
        return self._views.get(name) if name is not None else None

    def _show_counts(self) -> None:
        models = self._views.values()
        serving = sum(1 for m in models if m.state == "serving")
        status = self.query_one("#status", Static)
        show_text(
            status, f"Models: {len(models)} ({serving} serving) · live from {self._client.address}"
        )
        status.set_class(False, "-error")
        self.query_one("#empty").display = not self._views
        self.query_one("#models").display = bool(self._views)
        self.bindings_for(self._selected_name())
