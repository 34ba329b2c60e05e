"""The Weights dialog (f on Nodes) and its remove against a live node, for tests/tui/parity/test_parity.py.

Before cpu-node's agent starts, its weights cache is given what earlier
replicas would have left there (``plant``): two models' files and a repository
at a commit, as the fetcher lays them out. The agent reports them as it
registers; the dialog is compared with ``ctl weights cpu-node``, and its remove
takes one away after asking, which ``ctl weights cpu-node`` then no longer lists.
``SCREENS`` and ``ACTIONS`` are in the shape of ``kit``'s.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Group
from rich.text import Text

from llmgw.present.weightsfmt import NO_ENTRIES, node_line, node_notes, weights_cells
from proto.llmgw.v1 import ListWeightsReply
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
    to_nodes,
    until,
)
from tui.parity import Item

NODE = "cpu-node"
KEPT = ("parity-llama", "hf/parity/tiny/c0ffee")
REMOVED = "parity-old"


def plant(data_dir: Path) -> None:
    """What earlier replicas left in ``data_dir``'s weights cache."""
    weights = data_dir / "weights"
    for name in ("parity-llama", REMOVED):
        d = weights / name
        d.mkdir(parents=True)
        (d / "model.gguf").write_bytes(b"GGUF" + b"\0" * 4096)
        (d / ".model.gguf.json").write_text(
            json.dumps({"source": f"hf:parity/{name}@c0:model.gguf"})
        )
    repo = weights / "hf" / "parity" / "tiny" / "c0ffee"
    repo.mkdir(parents=True)
    (repo / "config.json").write_text("{}")
    (repo / "model.safetensors").write_bytes(b"\0" * 8192)
    (repo / ".llmgw-complete.json").write_text("{}")


async def to_node_weights(app, pilot, live: Live) -> None:
    await to_nodes(app, pilot, live)
    await cursor_to(pilot, "#nodes", NODE)
    await press(pilot, "NodesScreen", "weights", "NodeWeights")


def _rows(reply: ListWeightsReply) -> dict[str, list[str]]:
    (n,) = reply.nodes
    return {e.key: cells(weights_cells(e)) for e in n.report.entries}


def _head(reply: ListWeightsReply) -> str:
    (n,) = reply.nodes
    nothing = [Text(NO_ENTRIES)] if n.reported_at and not n.report.entries else []
    return plain(Group(node_line(n), *node_notes(n), *nothing))


async def check_node_weights(app, pilot, live: Live) -> None:
    item = ("NodeWeights", None)

    async def said():
        reply = ListWeightsReply.from_dict(await live.said(item, node=NODE))
        return _head(reply), _rows(reply)

    def shown():
        rows = table_rows(app, "#weights")
        return (static_text(app, "#weights-head"), rows) if rows else None

    # The free disk on the line moves as other tests write: read both again until they agree.
    _, rows = await agree(pilot, shown, said, again=app.screen.reload)
    assert set(KEPT) <= set(rows)


async def do_remove(app, pilot, live: Live) -> None:
    item: Item = ("NodeWeights", "remove")
    await to_node_weights(app, pilot, live)
    await cursor_to(pilot, "#weights", REMOVED)
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: screen_is(app, "NodeWeights"))
    await until(pilot, lambda: "Removed from" in static_text(app, "#weights-status"))
    assert REMOVED in static_text(app, "#weights-status")

    async def said():
        return _rows(ListWeightsReply.from_dict(await live.shown_by(item, node=NODE)))

    rows = await agree(pilot, lambda: table_rows(app, "#weights"), said, again=app.screen.reload)
    assert REMOVED not in rows and set(KEPT) <= set(rows)


SCREENS: dict[str, tuple[Step, Step | None]] = {
    "NodeWeights": (to_node_weights, check_node_weights),
}
ACTIONS: dict[Item, Step] = {
    ("NodeWeights", "remove"): do_remove,
}
