"""Parity of the Models screen's resources dialog with ``llmgw ctl model resources``.

The dialog opened on sim-chat shows what the command says of it (its profile's cores,
its replicas with what they hold, the nodes' cores); setting cores on parity-cores
through it is read back with the command.
"""

from __future__ import annotations

from textual.widgets import Input

from llmgw.present.resourcesfmt import ModelResources, node_cells, profile_line, replica_cells
from tests.tui.parity.kit import (
    Live,
    Step,
    agree,
    cells,
    cursor_to,
    plain,
    press,
    screen_is,
    static_text,
    table_rows,
    to_mode,
    until,
)
from tui.parity import Item

# A model with no replicas whose cores the action changes.
CORES_MODEL = "parity-cores"


def _shown(app) -> tuple:
    return (
        static_text(app, "#resources-profiles"),
        table_rows(app, "#resources-replicas"),
        table_rows(app, "#resources-nodes"),
    )


def _drawn(facts: ModelResources) -> tuple:
    return (
        plain("\n".join(profile_line(p) for p in facts.profiles)),
        {r.replica_id: cells(replica_cells(r)) for r in facts.replicas},
        {n.node_id: cells(node_cells(n)) for n in facts.nodes},
    )


async def _open_on(app, pilot, name: str) -> None:
    await to_mode(pilot, "models")
    await cursor_to(pilot, "#models", name)
    await press(pilot, "ModelsScreen", "resources", "ResourcesDialog")


async def to_resources(app, pilot, live: Live) -> None:
    await _open_on(app, pilot, "sim-chat")


async def check_resources(app, pilot, live: Live) -> None:
    name = app.screen.model_name

    async def said():
        reply = await live.said(("ResourcesDialog", None), model=name)
        return _drawn(ModelResources.model_validate(reply))

    got = await agree(pilot, lambda: _shown(app), said, again=app.screen.reload)
    assert "no cores reserved" in got[0] and got[2]


async def do_resources(app, pilot, live: Live) -> None:
    item = ("ModelsScreen", "resources")
    await _open_on(app, pilot, CORES_MODEL)
    box = app.screen.query_one("#resources-cores", Input)
    box.value = "2"
    box.focus()
    await pilot.press("enter")
    await until(pilot, lambda: screen_is(app, "ModelsScreen"))

    async def said():
        facts = ModelResources.model_validate(await live.shown_by(item, model=CORES_MODEL))
        return facts.profiles[0].cores

    await agree(pilot, lambda: 2, said)


SCREENS: dict[str, tuple[Step, Step | None]] = {
    "ResourcesDialog": (to_resources, check_resources),
}
ACTIONS: dict[Item, Step] = {
    ("ModelsScreen", "resources"): do_resources,
}
