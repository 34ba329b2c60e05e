"""The Mirror screen: the cluster's mirrors, what they hold, their disk, their peers.

It shows what ``llmgw ctl mirror list`` prints (each mirror with its state;
the revisions the first one up holds; pulls under way), its disk and quota
as ``llmgw ctl mirror du`` reads them, and its peers with their lag as
``llmgw ctl mirror peers list``, each row drawn with the commands' cell
helpers (``llmgw.present.mirrorfmt``). ``a`` opens the Add dialog (the
options of ``mirror add``) and follows the add on the progress line, bytes,
rate and time left as the mirror reports them; ``d`` removes the selected
revision after asking (``mirror rm REPO@COMMIT``). The mirror sends no
events, so the screen reads again every ``REFRESH_S`` while shown, when
shown again, after an add or removal, and on r.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.present.mirrorfmt import (
    MIRROR_COLUMNS,
    NO_MIRRORS,
    NO_PEERS,
    NO_REVISIONS,
    PEER_COLUMNS,
    PULL_COLUMNS,
    PULL_ENDED,
    REVISION_COLUMNS,
    du_line,
    mirror_cells,
    peer_cells,
    progress_line,
    pull_cells,
    revision_cells,
    short_commit,
    size_text,
)
from proto.llmgw.v1 import (
    ListMirrorsReply,
    MirrorAddRequest,
    MirrorDuReply,
    MirrorPeersReply,
    MirrorProgress,
    MirrorRemoveReply,
    MirrorRevisionView,
)
from tui.screens.common import AdminFailed, Refused, describe, show_worker_error
from tui.screens.dialogs import Confirm
from tui.screens.live import LiveRows, Rereads, selected_key, show_text
from tui.screens.mirror.mirror_add import MirrorAddDialog
from tui.screens.shell import KeyFooter, ShellHeader

# 3 s: a pull's row moves while one watches; a screen left open asks no more than this.
REFRESH_S = 3.0


def keys_of(columns: tuple[str, ...]) -> tuple[str, ...]:
    """DataTable column keys: the command's headings, lower case."""
    return tuple(c.lower() for c in columns)


def revision_key(r: MirrorRevisionView) -> str:
    return f"{r.kind or 'model'}:{r.repo}@{r.commit}"


@dataclass
class MirrorRead:
    """What one read of the screen got; du and peers are None when no mirror is up."""

    mirrors: ListMirrorsReply
    du: MirrorDuReply | None = None
    peers: MirrorPeersReply | None = None


class MirrorLoaded(Message):
    def __init__(self, read: MirrorRead) -> None:
        super().__init__()
        self.read = read


class AddProgressed(Message):
    """One MirrorProgress of the add the screen follows (the last carries the revision)."""

    def __init__(self, progress: MirrorProgress) -> None:
        super().__init__()
        self.progress = progress


class AddRefused(Refused):
    """gatewayd or the mirror refused the add (quota, a name), or was not reached."""


class RevisionRemoved(Message):
    def __init__(self, reply: MirrorRemoveReply) -> None:
        super().__init__()
        self.reply = reply


class RemoveRefused(Refused):
    """gatewayd or the mirror refused the removal, or was not reached."""


class MirrorScreen(Rereads, Screen[None]):
    """Mirrors and their state; the revisions held, pulls, disk and peers of the first up."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "add", "Add"),
        Binding("d,delete", "remove", "Remove"),
    ]

    def __init__(self, client: AdminClient) -> None:
        super().__init__()
        self._client = client
        self._mirrors: LiveRows = LiveRows(keys_of(MIRROR_COLUMNS), mirror_cells)
        self._revisions: LiveRows[MirrorRevisionView] = LiveRows(
            keys_of(REVISION_COLUMNS), revision_cells
        )
        self._pulls: LiveRows = LiveRows(keys_of(PULL_COLUMNS), pull_cells)
        self._peers: LiveRows = LiveRows(keys_of(PEER_COLUMNS), peer_cells)
        self._read: MirrorRead | None = None
        # The add being followed: one at a time from this screen (others go on in the mirror).
        self.adding = False

    def compose(self) -> ComposeResult:
        yield ShellHeader("mirror")
        yield Static(f"Reading the mirrors through {self._client.address}…", id="status")
        yield Static(id="action-line")
        yield self._table("mirrors", MIRROR_COLUMNS, cursor=False)
        yield Static(id="mirror-disk")
        yield self._table("revisions", REVISION_COLUMNS, cursor=True)
        yield Static(NO_REVISIONS, id="revisions-empty")
        yield self._table("pulls", PULL_COLUMNS, cursor=False)
        yield self._table("peers", PEER_COLUMNS, cursor=False)
        yield Static(NO_PEERS, id="peers-empty")
        yield KeyFooter()

    @staticmethod
    def _table(name: str, columns: tuple[str, ...], *, cursor: bool) -> DataTable:
        table: DataTable = DataTable(
            id=name, cursor_type="row" if cursor else "none", zebra_stripes=cursor
        )
        for heading, key in zip(columns, keys_of(columns), strict=True):
            table.add_column(heading, key=key)
        return table

    def on_mount(self) -> None:
        for name in ("action-line", "mirror-disk", "revisions-empty", "pulls", "peers-empty"):
            self.query_one(f"#{name}").display = False
        self.query_one("#revisions", DataTable).focus()
        self.reread_every(REFRESH_S)

    # -- what is selected ----------------------------------------------------------------

    def selected_revision(self) -> MirrorRevisionView | None:
        table = next(self.query("#revisions").results(DataTable), None)
        key = None if table is None else selected_key(table)
        return None if key is None else self._revisions.views.get(key)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "remove":
            return True if self.selected_revision() is not None else None
        if action == "add":
            # Shown but dimmed while one is followed, or while no mirror is up.
            up = self._read is not None and bool(self._read.mirrors.served_by)
            return True if up and not self.adding else None
        return True

    # -- actions: a dialog, then a worker --------------------------------------------------

    def action_add(self) -> None:
        def send(request: MirrorAddRequest | None) -> None:
            if request is not None:
                self.adding = True
                self._say(f"adding {request.source}…", error=False)
                self.refresh_bindings()
                self.run_add(request)

        self.app.push_screen(MirrorAddDialog(), send)

    def action_remove(self) -> None:
        r = self.selected_revision()
        if r is None:
            return
        where = self._read.mirrors.served_by if self._read else "the mirror"

        def remove(yes: bool | None) -> None:
            if yes:
                self.run_remove(r.repo, r.commit)

        question = (
            f"Remove {r.repo}@{short_commit(r.commit)} ({size_text(r.size_bytes)}) from {where}"
            " and its peers? Nodes that fetched it keep their copy; adding it again pulls it"
            " again."
        )
        self.app.push_screen(Confirm(f"Remove {r.repo}", question, "Remove"), remove)

    # -- workers: the only code here that talks to gatewayd ----------------------------------

    @work(exclusive=True, exit_on_error=False, group="mirror-load")
    async def load(self) -> None:
        try:
            read = MirrorRead(await self._client.list_mirrors())
            if read.mirrors.served_by:
                read.du = await self._client.mirror_disk_usage()
                read.peers = await self._client.list_mirror_peers()
        except LlmgwError as e:
            self.post_message(AdminFailed(e))
            return
        self.post_message(MirrorLoaded(read))

    @work(exclusive=True, exit_on_error=False, group="mirror-add")
    async def run_add(self, request: MirrorAddRequest) -> None:
        try:
            async for progress in self._client.add_to_mirror(request):
                self.post_message(AddProgressed(progress))
        except LlmgwError as e:
            self.post_message(AddRefused(e))

    @work(exclusive=True, exit_on_error=False, group="mirror-remove")
    async def run_remove(self, repo: str, commit: str) -> None:
        try:
            reply = await self._client.remove_from_mirror(repo, commit)
        except LlmgwError as e:
            self.post_message(RemoveRefused(e))
            return
        self.post_message(RevisionRemoved(reply))

    # -- message handlers: widgets only ------------------------------------------------------

    def on_mirror_loaded(self, message: MirrorLoaded) -> None:
        self._read = read = message.read
        reply = read.mirrors
        self._fill(self._mirrors, "#mirrors", [(m.url, m) for m in reply.mirrors])
        self._fill(self._revisions, "#revisions", [(revision_key(r), r) for r in reply.revisions])
        self._fill(self._pulls, "#pulls", [(p.pull_id, p) for p in reply.pulls])
        peers = list(read.peers.peers) if read.peers else []
        self._fill(self._peers, "#peers", [(p.url, p) for p in peers])
        self._show()

    def _fill(self, rows: LiveRows, selector: str, views: list) -> None:
        table = self.query_one(selector, DataTable)
        if [k for k, _ in views] != list(rows.views):
            rows.load(table, views)
        else:
            for key, view in views:
                rows.put(key, view)
            rows.flush(table)

    def on_add_progressed(self, message: AddProgressed) -> None:
        p = message.progress.pull
        if p is None:
            return
        self._say(progress_line(p), error=p.state == "failed")
        if p.state in PULL_ENDED:
            self._add_ended()
            if message.progress.revision is not None:
                r = message.progress.revision
                self._say(
                    f"Held: {r.repo}@{short_commit(r.commit)}, {size_text(r.size_bytes)} in"
                    f" {r.files} file(s)",
                    error=False,
                )

    def on_add_refused(self, message: AddRefused) -> None:
        self._say(describe(message.error), error=True)
        self._add_ended()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        show_worker_error(self.query_one("#status", Static), event)
        # A stream that ended without a last word (detached, or cut) ends the add here too.
        if event.worker.group == "mirror-add" and event.worker.is_finished and self.adding:
            self._add_ended()

    def _add_ended(self) -> None:
        self.adding = False
        self.refresh_bindings()
        self.load()

    def on_revision_removed(self, message: RevisionRemoved) -> None:
        names = ", ".join(f"{r.repo}@{short_commit(r.commit)}" for r in message.reply.removed)
        self._say(f"Removed {names}; {size_text(message.reply.freed_bytes)} freed.", error=False)
        self.load()

    def on_remove_refused(self, message: RemoveRefused) -> None:
        self._say(describe(message.error), error=True)
        self.load()

    def on_admin_failed(self, message: AdminFailed) -> None:
        status = self.query_one("#status", Static)
        status.update(describe(message.error, message.retry_in_s))
        status.set_class(True, "-error")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_bindings()

    # -- the widgets ---------------------------------------------------------------------------

    def _say(self, text, *, error: bool) -> None:
        """What the last add or removal did (an add: its progress, live), until the next."""
        line = self.query_one("#action-line", Static)
        line.update(text)
        line.set_class(error, "-error")
        line.display = True

    def _show(self) -> None:
        read = self._read
        if read is None:
            return
        reply = read.mirrors
        up = sum(1 for m in reply.mirrors if m.state == "up")
        status = self.query_one("#status", Static)
        if not reply.mirrors:
            text = NO_MIRRORS
        elif reply.served_by:
            text = (
                f"Mirrors: {len(reply.mirrors)} ({up} up) · {len(reply.revisions)} revisions"
                f" held by {reply.served_by} · every {REFRESH_S:g} s"
            )
        else:
            text = f"Mirrors: {len(reply.mirrors)}, none up: what they hold cannot be read now"
        show_text(status, text)
        status.set_class(bool(reply.mirrors) and not reply.served_by, "-error")
        disk = self.query_one("#mirror-disk", Static)
        disk.display = read.du is not None
        if read.du is not None:
            d = read.du
            show_text(
                disk,
                f"Disk: {du_line(d.used_bytes, d.max_bytes, d.free_disk_bytes)}"
                f" · {size_text(d.unreferenced_bytes)} unreferenced",
            )
        held = bool(reply.served_by)
        self.query_one("#mirrors").display = bool(reply.mirrors)
        self.query_one("#revisions").display = bool(reply.revisions)
        self.query_one("#revisions-empty").display = held and not reply.revisions
        self.query_one("#pulls").display = bool(reply.pulls)
        peers = read.peers.peers if read.peers else []
        self.query_one("#peers").display = bool(peers)
        self.query_one("#peers-empty").display = held and not peers
        self.refresh_bindings()
