"""The Mirror screen, its add and its remove against a live mirror, for tests/tui/parity/test_parity.py.

``Mirrors`` runs two real mirror daemons on loopback (``llmgw mirror serve``'s
MirrorDaemon): A, the cluster's mirror (server.yaml ``mirror.urls``), pulling
from a FakeHub holding small repositories, and B, A's peer. The fixture puts
two repositories into A through gatewayd (``add_to_mirror``, the real pull);
the screen is compared with ``ctl mirror list``, ``du`` and ``peers list``;
its add pulls a third through the dialog and ``ctl mirror list`` shows it
held; its remove takes one away after asking and the list no longer has it.
``SCREENS`` and ``ACTIONS`` are in the shape of ``kit``'s.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from textual.widgets import Input

from llmgw.mirror.config import MirrorsConfig, MirrorServeConfig
from llmgw.paths import Paths
from llmgw.present.mirrorfmt import du_line, mirror_cells, peer_cells, revision_cells, size_text
from mirrord.daemon import MirrorDaemon
from proto.llmgw.v1 import ListMirrorsReply, MirrorAddRequest, MirrorDuReply, MirrorPeersReply
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo
from tests.tui.parity.kit import (
    Live,
    Step,
    agree,
    cells,
    cursor_to,
    press,
    screen_is,
    static_text,
    table_rows,
    to_mode,
    until,
)
from tui.parity import Item
from tui.screens.mirror.mirror import revision_key

# Held from the start; one added through the dialog; one removed through the screen.
HELD = ("parity/tiny-a", "parity/tiny-b")
ADDED = "parity/tiny-added"
REMOVED = "parity/tiny-removed"
PICKLED = "parity/pickled"


@dataclass
class Mirrors:
    """Two mirror daemons (A the cluster's, B its peer) and the hub A pulls from."""

    home: Path
    hub: FakeHub = field(default_factory=FakeHub)
    daemons: list[MirrorDaemon] = field(default_factory=list)
    read_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    # Mirror A's quota (0: none).
    max_bytes: int = 0

    async def start(self) -> Self:
        await self.hub.__aenter__()
        for i, name in enumerate((*HELD, ADDED, REMOVED)):
            self.hub.add_repo(name, make_tiny_repo(seed=i).files)
        # What a pull refuses unless the add allows it: a pickle file beside the config.
        self.hub.add_repo(PICKLED, {"config.json": b"{}", "pytorch_model.bin": b"\x80\x04N."})
        b = await self._daemon("b", upstream="")
        await self._daemon("a", upstream=self.hub.url, peers=[b.url], max_bytes=self.max_bytes)
        return self

    async def _daemon(self, name: str, **settings) -> MirrorDaemon:
        home = self.home / f"mirror-{name}"
        cfg = MirrorServeConfig.model_validate(
            {"listen": "127.0.0.1:0", "data_dir": str(home / "data"), **settings}
        )
        # Peers read each other with the read token, as mirrors of one cluster do.
        daemon = MirrorDaemon(
            cfg, Paths.under(home), read_token=self.read_token, admin_token=self.admin_token
        )
        await daemon.start()
        self.daemons.append(daemon)
        return daemon

    @property
    def url(self) -> str:
        """Mirror A: the one the cluster uses."""
        return self.daemons[-1].url

    def settings(self) -> MirrorsConfig:
        """server.yaml ``mirror:`` naming A, with token files of its own."""
        secrets_dir = self.home / "tokens"
        secrets_dir.mkdir(parents=True, exist_ok=True)
        read, admin = secrets_dir / "mirror-read-token", secrets_dir / "mirror-admin-token"
        read.write_text(self.read_token)
        admin.write_text(self.admin_token)
        read.chmod(0o600)
        admin.chmod(0o600)
        return MirrorsConfig(
            urls=[self.url],
            read_token_file=str(read),
            admin_token_file=str(admin),
            probe_interval_s=1,
        )

    async def fill(self, admin) -> None:
        """What the screen starts with, pulled through gatewayd as `ctl mirror add` would."""
        for name in (*HELD, REMOVED):
            last = None
            async for last in admin.add_to_mirror(MirrorAddRequest(source=f"hf:{name}@main")):
                pass
            assert last is not None and last.revision is not None, f"{name}: {last}"

    async def stop(self) -> None:
        for daemon in reversed(self.daemons):
            await daemon.stop()
        await self.hub.__aexit__(None, None, None)

    async def __aenter__(self) -> Self:
        try:
            return await self.start()
        except BaseException:
            await self.stop()
            raise

    async def __aexit__(self, *exc) -> None:
        await self.stop()


# -- the screen ------------------------------------------------------------------------------


async def to_mirror(app, pilot, live: Live) -> None:
    await to_mode(pilot, "mirror")


def _revisions_shown(app) -> dict[str, list[str]]:
    return table_rows(app, "#revisions")


async def _revisions_said(live: Live, item: Item, index: int = 0) -> dict[str, list[str]]:
    reply = ListMirrorsReply.from_dict(await live.said(item, index))
    return {revision_key(r): cells(revision_cells(r)) for r in reply.revisions}


async def check_mirror(app, pilot, live: Live) -> None:
    item = ("MirrorScreen", None)
    reload = app.screen.reload

    async def mirrors_said() -> dict[str, list[str]]:
        reply = ListMirrorsReply.from_dict(await live.said(item, 0))
        return {m.url: cells(mirror_cells(m)) for m in reply.mirrors}

    # Each read asks the mirrors afresh (CHECKED moves): read again until both agree.
    shown = await agree(pilot, lambda: table_rows(app, "#mirrors"), mirrors_said, again=reload)
    assert [row[1] for row in shown.values()] == ["up"]
    held = await agree(
        pilot, lambda: _revisions_shown(app), lambda: _revisions_said(live, item), again=reload
    )
    assert {row[0] for row in held.values()} >= set(HELD)

    async def disk_said() -> str:
        d = MirrorDuReply.from_dict(await live.said(item, 1))
        return (
            f"Disk: {du_line(d.used_bytes, d.max_bytes, d.free_disk_bytes)}"
            f" · {size_text(d.unreferenced_bytes)} unreferenced"
        )

    await agree(pilot, lambda: static_text(app, "#mirror-disk").strip(), disk_said, again=reload)

    async def peers_said() -> dict[str, list[str]]:
        reply = MirrorPeersReply.from_dict(await live.said(item, 2))
        return {p.url: cells(peer_cells(p)) for p in reply.peers}

    peers = await agree(pilot, lambda: table_rows(app, "#peers"), peers_said, again=reload)
    assert len(peers) == 1


async def do_add(app, pilot, live: Live) -> None:
    item = ("MirrorScreen", "add")
    await to_mirror(app, pilot, live)
    await until(pilot, lambda: app.screen.check_action("add", ()) is True)
    await press(pilot, *item, "MirrorAddDialog")
    app.screen.query_one("#add-source", Input).value = f"hf:{ADDED}@main"
    app.screen.query_one("#add-include", Input).value = "*.safetensors"
    await pilot.click("#form-ok")
    await until(pilot, lambda: screen_is(app, "MirrorScreen"))
    await until(pilot, lambda: "Held: " in static_text(app, "#action-line"), tries=600)

    async def said():
        return await _revisions_said_by(live, item)

    held = await agree(pilot, lambda: _revisions_shown(app), said, again=app.screen.reload)
    assert ADDED in {row[0] for row in held.values()}


async def do_remove(app, pilot, live: Live) -> None:
    item = ("MirrorScreen", "remove")
    await to_mirror(app, pilot, live)
    key = await _key_of(pilot, app, REMOVED)
    await cursor_to(pilot, "#revisions", key)
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: screen_is(app, "MirrorScreen"))
    await until(pilot, lambda: "Removed " in static_text(app, "#action-line"))
    held = await agree(
        pilot,
        lambda: _revisions_shown(app),
        lambda: _revisions_said_by(live, item),
        again=app.screen.reload,
    )
    assert REMOVED not in {row[0] for row in held.values()}


async def _key_of(pilot, app, repo: str) -> str:
    await until(pilot, lambda: any(r[0] == repo for r in _revisions_shown(app).values()))
    return next(k for k, r in _revisions_shown(app).items() if r[0] == repo)


async def _revisions_said_by(live: Live, item: Item) -> dict[str, list[str]]:
    reply = ListMirrorsReply.from_dict(await live.shown_by(item))
    return {revision_key(r): cells(revision_cells(r)) for r in reply.revisions}


SCREENS: dict[str, tuple[Step, Step | None]] = {
    "MirrorScreen": (to_mirror, check_mirror),
}
ACTIONS: dict[Item, Step] = {
    ("MirrorScreen", "add"): do_add,
    ("MirrorScreen", "remove"): do_remove,
}
