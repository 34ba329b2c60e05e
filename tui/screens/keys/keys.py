"""The Keys & tenancy screen: organizations → teams → projects, and their API keys.

The tree is ``list_tenants()`` (``llmgw ctl org|team|project list``); the table
beside it is ``list_keys()`` (``llmgw ctl keys list``), cut to the level under
the tree's cursor, each row drawn with the command's ``key_cells``.

Keys: ``a`` creates an org, team or project (``create_tenant``), ``e`` renames
and ``d`` removes the level under the cursor; ``c`` makes a key in the
selected project (``create_key``) and shows its secret once, ``x`` revokes
the highlighted key after asking, ``o`` rotates it (``rotate_key``, the new
secret shown once), ``l`` changes the limits of the highlighted key when the
table has the focus, of the level otherwise (``set_limits``).

gatewayd announces no change to keys or the tree, so the screen reads both
again whenever it is shown, after each change it makes, and on r. Only
workers talk to gatewayd; a refusal is a notification in gatewayd's words.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static, Tree
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.keyfmt import (
    KEY_COLUMNS,
    NO_KEYS,
    NOUNS,
    describe_limits,
    key_cells,
    key_works,
    retention_text,
    tenant_line,
)
from proto.llmgw.v1 import KeyView, TenantView
from tui.screens.common import AdminFailed, Refused, describe, show_worker_error
from tui.screens.dialogs import Confirm
from tui.screens.keys.key_dialogs import (
    KeyDialog,
    LevelDialog,
    LimitsDialog,
    LimitsEdit,
    NewKey,
    NewLevel,
    RenameDialog,
    RetentionDialog,
    RotateDialog,
    SecretShown,
)
from tui.screens.live import Rereads
from tui.screens.shell import KeyFooter, ShellHeader

# DataTable column keys: the command's headings, lower case ("key", "last_used", …).
COLUMN_KEYS = tuple(c.lower().replace(" ", "_") for c in KEY_COLUMNS)
# The tree's root: every level, and every key in the table.
ALL = ""


class TenancyLoaded(Message):
    """The tree and the keys arrived (``list_tenants`` and ``list_keys``)."""

    def __init__(self, tenants: list[TenantView], keys: list[KeyView]) -> None:
        super().__init__()
        self.tenants = tenants
        self.keys = keys


class TenancyChanged(Message):
    """A change was made; ``path`` and ``key_id`` are what to put the cursors on after."""

    def __init__(self, note: str, *, path: str | None = None, key_id: str | None = None) -> None:
        super().__init__()
        self.note = note
        self.path = path
        self.key_id = key_id


class KeyMade(Message):
    """``create_key`` or ``rotate_key`` answered with the new key and its secret."""

    def __init__(self, view: KeyView) -> None:
        super().__init__()
        self.view = view


class ActionRefused(Refused):
    """gatewayd refused a change, or could not be asked."""


class KeysScreen(Rereads, Screen[None]):
    """The org/team/project tree on the left, the keys of the level under its cursor beside it.

    Nothing announces key changes, so coming back from another mode reads them (Rereads).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "new_level", "New level"),
        Binding("c", "new_key", "New key"),
        Binding("x", "revoke", "Revoke"),
        Binding("t", "rotate", "Rotate"),
        Binding("l", "limits", "Limits"),
        Binding("e", "rename", "Rename"),
        # Off the footer (80 columns hold no more); in the palette and the level pane.
        Binding("s", "retention", "Retention", show=False),
        Binding("d,delete", "remove", "Remove level"),
    ]

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._tenants: dict[str, TenantView] = {}
        self._keys: dict[str, KeyView] = {}
        # Where the cursors go once the next read arrives (after a change).
        self._want_path: str | None = None
        self._want_key: str | None = None
        # The level whose keys the table shows now (it follows the tree's cursor).
        self.shown_path: str | None = None

    def compose(self) -> ComposeResult:
        yield ShellHeader("keys")
        yield Static(f"Reading keys from {self._client.address}…", id="status")
        with Horizontal(id="keys-body"):
            tree: Tree[str] = Tree("All organizations", data=ALL, id="tenants")
            yield tree
            with Vertical(id="keys-side"):
                yield Static(id="level")
                table: DataTable = DataTable(id="keys", cursor_type="row", zebra_stripes=True)
                for heading, key in zip(KEY_COLUMNS, COLUMN_KEYS, strict=True):
                    table.add_column(heading, key=key)
                yield table
                yield Static(id="keys-empty")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#keys-empty").display = False
        self.query_one("#tenants", Tree).focus()

    # -- what is selected ----------------------------------------------------------

    def selected_path(self) -> str:
        """The path under the tree's cursor; ALL ("") for the root or no cursor."""
        tree = next(self.query("#tenants").results(Tree), None)
        node = tree.cursor_node if tree is not None else None
        return node.data if node is not None and node.data else ALL

    def selected_level(self) -> TenantView | None:
        return self._tenants.get(self.selected_path())

    def selected_key(self) -> KeyView | None:
        """The key on the table's highlighted row, as last read."""
        table = next(self.query("#keys").results(DataTable), None)
        if table is None or not table.row_count:
            return None
        row = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self._keys.get(row) if row is not None else None

    def _limits_target(self) -> tuple[str, Any] | None:
        """(scope, current limits): the key when the table has the focus, else the level."""
        key = self.selected_key()
        if key is not None and self.focused is self.query_one("#keys"):
            return key.key_id, key.limits
        level = self.selected_level()
        return (level.path, level.limits) if level is not None else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.is_mounted:
            return True
        level = self.selected_level()
        if action in ("new_key", "retention"):
            return True if level is not None and level.kind == "project" else None
        if action in ("revoke", "rotate"):
            return True if self.selected_key() is not None else None
        if action in ("rename", "remove"):
            return True if level is not None else None
        if action == "limits":
            return True if self._limits_target() is not None else None
        return True

    # -- actions: dialogs, then a worker -------------------------------------------

    def action_new_level(self) -> None:
        level = self.selected_level()
        start = f"{level.path}/" if level is not None and level.kind != "project" else ""

        def create(new: NewLevel | None) -> None:
            if new is None:
                return
            noun = NOUNS[new.kind]
            self.run_action(
                lambda c: c.create_tenant(new.kind, new.path, parents=new.parents),
                lambda v: TenancyChanged(f"Created the {noun} {v.path}.", path=v.path),
            )

        self.app.push_screen(LevelDialog(start), create)

    def action_rename(self) -> None:
        level = self.selected_level()
        if level is None:
            return

        def rename(name: str | None) -> None:
            if name:
                self.run_action(
                    lambda c: c.rename_tenant(level.kind, level.path, name),
                    lambda v: TenancyChanged(f"Renamed {level.path} to {v.path}.", path=v.path),
                )

        self.app.push_screen(RenameDialog(level), rename)

    def action_remove(self) -> None:
        level = self.selected_level()
        if level is None:
            return
        noun = NOUNS.get(level.kind, level.kind)
        above = level.path.rsplit("/", 1)[0] if "/" in level.path else ALL

        def remove(yes: bool | None) -> None:
            if yes:
                self.run_action(
                    lambda c: c.remove_tenant(level.kind, level.path),
                    lambda r: TenancyChanged(f"Removed the {noun} {r.path}.", path=above),
                )

        question = (
            f"Remove the {noun} {level.path}? Only an empty one can go: nothing beneath it,"
            " no key that still works, no file, batch or MCP grant"
            f" (llmgw ctl {level.kind} rm {level.path} --force takes all of it)."
        )
        self.app.push_screen(Confirm(f"Remove {level.path}", question, "Remove"), remove)

    def action_new_key(self) -> None:
        level = self.selected_level()
        if level is None or level.kind != "project":
            return

        def create(new: NewKey | None) -> None:
            if new is None:
                return
            self.run_action(
                lambda c: c.create_key(
                    new.project,
                    name=new.name,
                    models=new.models,
                    expires_in_s=new.expires_in_s,
                    rpm=new.rpm,
                    tpm=new.tpm,
                    budget_month_micros=new.budget_month_micros,
                ),
                KeyMade,
            )

        self.app.push_screen(KeyDialog(level.path), create)

    def action_revoke(self) -> None:
        key = self.selected_key()
        if key is None:
            return

        def revoke(yes: bool | None) -> None:
            if yes:
                self.run_action(
                    lambda c: c.revoke_key(key.key_id),
                    lambda v: TenancyChanged(
                        f"Revoked {v.key_id}: its secret stops working within seconds.",
                        key_id=v.key_id,
                    ),
                )

        question = (
            f"Revoke {key.key_id} ({key.prefix}…, {key.name or 'no name'}) of {key.project}? "
            "Clients using it are refused from now on; this cannot be undone."
        )
        self.app.push_screen(Confirm(f"Revoke {key.key_id}", question, "Revoke"), revoke)

    def action_rotate(self) -> None:
        key = self.selected_key()
        if key is None:
            return

        def rotate(overlap_s: int | None) -> None:
            if overlap_s is not None:
                self.run_action(lambda c: c.rotate_key(key.key_id, overlap_s), KeyMade)

        self.app.push_screen(RotateDialog(key), rotate)

    def action_limits(self) -> None:
        target = self._limits_target()
        if target is None:
            return
        scope, current = target

        def set_limits(edit: LimitsEdit | None) -> None:
            if edit is not None:
                self.run_action(
                    lambda c: c.set_limits(edit.limits, clear=edit.clear),
                    lambda v: TenancyChanged(f"Limits of {v.scope}: {describe_limits(v)}."),
                )

        self.app.push_screen(LimitsDialog(scope, current), set_limits)

    def action_retention(self) -> None:
        level = self.selected_level()
        if level is None or level.kind != "project":
            return

        def set_retention(seconds: int | None) -> None:
            if seconds is not None:
                self.run_action(
                    lambda c: c.set_retention(level.path, seconds),
                    lambda v: TenancyChanged(
                        f"{v.path} keeps stored responses: {retention_text(v.retain_responses_s)}.",
                        path=v.path,
                    ),
                )

        self.app.push_screen(RetentionDialog(level), set_retention)

    # -- workers: the only code here that talks to gatewayd --------------------

    @work(exclusive=True, exit_on_error=False, group="keys-load")
    async def load(self) -> None:
        try:
            tenants = await self._client.list_tenants()
            keys = await self._client.list_keys()
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(TenancyLoaded(list(tenants.tenants), list(keys.keys)))

    @work(exit_on_error=False, group="keys-action")
    async def run_action(
        self,
        call: Callable[[AdminClient], Awaitable[Any]],
        done: Callable[[Any], Message],
    ) -> None:
        try:
            reply = await call(self._client)
        except LlmgwError as e:
            self.post_message(ActionRefused(e))
            return
        self.post_message(done(reply))

    # -- message handlers: widgets only ----------------------------------------

    def on_tenancy_loaded(self, message: TenancyLoaded) -> None:
        path = self._want_path if self._want_path is not None else self.selected_path()
        key_id = self._want_key if self._want_key is not None else self._selected_key_id()
        self._want_path = self._want_key = None
        self._tenants = {v.path: v for v in message.tenants}
        self._keys = {k.key_id: k for k in message.keys}
        self._fill_tree(message.tenants, path)
        self._fill_keys(key_id)
        status = self.query_one("#status", Static)
        working = sum(1 for k in message.keys if key_works(k))
        status.update(
            f"Levels: {len(message.tenants)} · keys: {len(message.keys)} ({working} working)"
            f" · from {self._client.address} · r reads again"
            if message.tenants or message.keys
            else "No organizations yet: press a and give ORG/TEAM/PROJECT, with its parents."
        )
        status.set_class(False, "-error")

    def on_tenancy_changed(self, message: TenancyChanged) -> None:
        self.notify(message.note)
        self._want_path, self._want_key = message.path, message.key_id
        self.load()

    def on_key_made(self, message: KeyMade) -> None:
        view = message.view
        self._want_path, self._want_key = view.project, view.key_id
        self.app.push_screen(SecretShown(view))
        self.load()

    def on_action_refused(self, message: ActionRefused) -> None:
        self.notify(describe(message.error), title="Refused", severity="error", timeout=10)

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        self._fill_keys(self._selected_key_id())

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_bindings()

    def on_descendant_focus(self) -> None:
        # l acts on the key or on the level depending on which has the focus.
        self.refresh_bindings()

    # -- the widgets -----------------------------------------------------------------

    def _fill_tree(self, tenants: list[TenantView], path: str) -> None:
        tree = self.query_one("#tenants", Tree)
        tree.clear()
        nodes = {ALL: tree.root}
        # Sorted by path, a level comes after the one above it.
        for v in sorted(tenants, key=lambda t: t.path):
            above = nodes.get(v.path.rsplit("/", 1)[0] if "/" in v.path else ALL, tree.root)
            name = v.path.rsplit("/", 1)[-1]
            count = f"{v.keys} {'key' if v.keys == 1 else 'keys'}"
            label = Text.assemble(name, (f"  {v.kind} · {count}", "dim"))
            if v.kind == "project":
                nodes[v.path] = above.add_leaf(label, data=v.path)
            else:
                nodes[v.path] = above.add(label, data=v.path, expand=True)
        tree.root.expand()
        # Reading last_line lays the lines out, which a node needs to know its own.
        if tree.last_line >= 0:
            tree.move_cursor(nodes.get(path, tree.root))

    def _fill_keys(self, key_id: str | None) -> None:
        path = self.selected_path()
        level = self._tenants.get(path)
        shown = [
            k
            for k in self._keys.values()
            if not path or k.project == path or k.project.startswith(path + "/")
        ]
        table = self.query_one("#keys", DataTable)
        table.clear()
        self.shown_path = path
        for k in shown:
            table.add_row(*key_cells(k), key=k.key_id)
        if key_id is not None and any(k.key_id == key_id for k in shown):
            table.move_cursor(row=table.get_row_index(key_id))
        self.query_one("#level", Static).update(
            tenant_line(level) if level is not None else f"Every key ({len(shown)})"
        )
        empty = self.query_one("#keys-empty", Static)
        if level is not None and level.kind == "project":
            empty.update("No keys in this project yet. Make one: c")
        elif level is not None:
            empty.update(f"No keys beneath this {NOUNS.get(level.kind, level.kind)}.")
        else:
            empty.update(NO_KEYS)
        empty.display = not shown
        table.display = bool(shown)
        self.refresh_bindings()

    def _selected_key_id(self) -> str | None:
        key = self.selected_key()
        return key.key_id if key is not None else None
