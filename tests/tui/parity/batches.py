"""The Batches screen and its cancel against the live cluster, for tests/tui/parity/test_parity.py.

``make_batches`` gives the cluster real batches through the Batch API (the
``openai`` SDK uploads a file and creates the batch with a project's key):
one that completes on sim-chat, one that waits on a model with no replica
(it stays in progress until cancelled). ``SCREENS`` and ``ACTIONS`` say how
the screen is opened and compared, and how its cancel is performed and read
back, in the shape of ``kit.SCREENS`` and ``actions.ACTIONS``.
"""

from __future__ import annotations

import json

from openai import AsyncOpenAI

from llmgw.present.batchfmt import batch_cells, batch_details
from proto.llmgw.v1 import BatchView, ListBatchesReply
from tests.cluster_fixture import Cluster, wait_for
from tests.tui.parity.kit import (
    READY_ATTEMPTS,
    SEARCH,
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

# A model placed nowhere: its batch requests meet 503 no_replica_ready and wait.
NOWHERE = "parity-batch-nowhere"


class Batches:
    """Makes batches with one project key, over the cluster's client API."""

    def __init__(self, cluster: Cluster, secret: str) -> None:
        base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
        self.client = AsyncOpenAI(base_url=base, api_key=secret, max_retries=0)

    async def make(self, model: str, n: int) -> str:
        lines = [
            {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": model, "messages": [{"role": "user", "content": f"hi {i}"}]},
            }
            for i in range(n)
        ]
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        f = await self.client.files.create(file=("in.jsonl", data), purpose="batch")
        made = await self.client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        return made.id


async def make_batches(cluster: Cluster, admin) -> Batches:
    """One batch completed on sim-chat and one waiting on NOWHERE; the maker, for more."""
    from tests.tui.test_models_screen import sim_model

    await admin.put_model(sim_model(NOWHERE, replicas=0), create_only=True)
    key = await admin.create_key(SEARCH, name="parity-batches")
    batches = Batches(cluster, key.secret)
    done = await batches.make("sim-chat", 3)
    await batches.make(NOWHERE, 2)

    async def completed() -> bool:
        return (await admin.get_batch(done)).status == "completed"

    await wait_for(completed, attempts=READY_ATTEMPTS)
    return batches


async def to_batches(app, pilot, live: Live) -> None:
    await to_mode(pilot, "batches")
    await until(pilot, lambda: bool(table_rows(app, "#batches")))


async def _rows_said(live: Live, item: Item, index: int = 0) -> dict[str, list[str]]:
    reply = ListBatchesReply.from_dict(await live.said(item, index))
    return {b.id: cells(batch_cells(b)) for b in reply.batches}


async def check_batches(app, pilot, live: Live) -> None:
    item = ("BatchesScreen", None)
    rows = await agree(
        pilot, lambda: table_rows(app, "#batches"), lambda: _rows_said(live, item), tries=200
    )
    statuses = {r[1] for r in rows.values()}
    assert {"completed", "in_progress"} <= statuses, rows

    # The pane is the highlighted batch as `ctl batches show` draws it.
    done = next(k for k, r in rows.items() if r[1] == "completed")
    await cursor_to(pilot, "#batches", done)

    async def pane_said() -> str:
        view = BatchView.from_dict(await live.said(item, 1, batch=done))
        return plain(batch_details(view))

    text = await agree(pilot, lambda: static_text(app, "#batch-pane"), pane_said)
    assert "3 in all: 3 completed, 0 failed, 0 to go" in text


async def do_cancel_batch(app, pilot, live: Live) -> None:
    item = ("BatchesScreen", "cancel_batch")
    waiting = await live.batches.make(NOWHERE, 2)
    await to_batches(app, pilot, live)
    app.screen.reload()
    await cursor_to(pilot, "#batches", waiting)
    await until(pilot, lambda: table_rows(app, "#batches")[waiting][1] == "in_progress")
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: screen_is(app, "BatchesScreen"))
    # Nothing of it was in flight: cancelling, then cancelled within a runner step.
    await until(
        pilot,
        lambda: table_rows(app, "#batches")[waiting][1] == "cancelled",
        tries=400,
    )
    said = await agree(
        pilot,
        lambda: table_rows(app, "#batches"),
        lambda: _rows_said_by(live, item),
        again=app.screen.reload,
    )
    assert said[waiting][1] == "cancelled"


async def _rows_said_by(live: Live, item: Item) -> dict[str, list[str]]:
    reply = ListBatchesReply.from_dict(await live.shown_by(item))
    return {b.id: cells(batch_cells(b)) for b in reply.batches}


SCREENS: dict[str, tuple[Step, Step | None]] = {
    "BatchesScreen": (to_batches, check_batches),
}
ACTIONS: dict[Item, Step] = {
    ("BatchesScreen", "cancel_batch"): do_cancel_batch,
}
