"""The Weights dialog (f on Nodes) against a real admin server over gRPC, driven by the pilot.

The server is the console tests' fake admin with ListWeights and RemoveWeights
answering as gatewayd does (a removal of weights a replica uses is kept, saying
by which). Against a real gatewayd and a real agent: tests/tui/parity/test_parity.py.
"""

from __future__ import annotations

import time

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from textual.widgets import DataTable, Static

from proto.llmgw.v1 import (
    CachedWeights,
    ListWeightsReply,
    ListWeightsRequest,
    NodeWeights,
    RemoveWeightsReply,
    RemoveWeightsRequest,
    WeightsReport,
)
from tests.tui.kit.fake_admin import FakeAdminServer, FakeAdminService, node
from tests.tui.parity.kit import plain
from tests.tui.test_nodes_screen import wait_until
from tui.app import LlmgwApp

GIB = 2**30
SIZE = (160, 40)


class WeightsService(FakeAdminService):
    """Nodes and each one's weights report (none: it has not reported)."""

    def __init__(self) -> None:
        super().__init__()
        self.reports: dict[str, WeightsReport] = {}
        self.removals: list[RemoveWeightsRequest] = []

    async def list_weights(self, message: ListWeightsRequest) -> ListWeightsReply:
        if message.node_id and message.node_id not in self.nodes:
            raise GRPCError(Status.NOT_FOUND, f"no node named {message.node_id!r}")
        ids = [message.node_id] if message.node_id else sorted(self.nodes)
        return ListWeightsReply(
            nodes=[
                NodeWeights(
                    node_id=n,
                    report=self.reports.get(n, WeightsReport()),
                    reported_at="2025-03-02T14:02:41+00:00" if n in self.reports else "",
                    connected=True,
                )
                for n in ids
            ]
        )

    async def remove_weights(self, message: RemoveWeightsRequest) -> RemoveWeightsReply:
        self.removals.append(message)
        report = self.reports[message.node_id]
        removed, kept, freed = [], [], 0
        for e in list(report.entries):
            if e.key not in message.keys:
                continue
            if e.used_by:
                kept.append(f"{e.key}: in use by replica {', '.join(e.used_by)}")
                continue
            report.entries.remove(e)
            removed.append(e.key)
            freed += e.size_bytes
        return RemoveWeightsReply(
            node_id=message.node_id, removed=removed, kept=kept, freed_bytes=freed
        )


def entry(key: str, size_gib: int, hours_ago: int, *used_by: str) -> CachedWeights:
    at = int((time.time() - hours_ago * 3600) * 1000)
    return CachedWeights(
        key=key, size_bytes=size_gib * GIB, last_used_unix_ms=at, used_by=list(used_by)
    )


@pytest.fixture
async def server():
    service = WeightsService()
    service.put(node("gpu-1", gpus=2))
    service.put(node("gpu-2", gpus=2))
    service.reports["gpu-1"] = WeightsReport(
        entries=[entry("old-model", 7, 50), entry("llama", 5, 2, "llama-7c1f")],
        limit_bytes=100 * GIB,
        total_bytes=12 * GIB,
        disk_free_bytes=300 * GIB,
        limit_percent=30,
        disk_total_bytes=400 * GIB,
    )
    async with FakeAdminServer(service=service) as srv:
        yield srv


def rows(app) -> list[list[str]]:
    t = app.screen.query_one("#weights", DataTable)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


def status(app) -> str:
    return plain(app.screen.query_one("#weights-status", Static).content)


async def open_weights(app, pilot, node_id: str) -> None:
    await wait_until(pilot, lambda: app.screen.query_one("#nodes", DataTable).row_count == 2)
    t = app.screen.query_one("#nodes", DataTable)
    t.move_cursor(row=t.get_row_index(node_id))
    await pilot.press("f")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "NodeWeights")


async def test_f_shows_what_a_node_keeps_and_a_removal_of_weights_in_use_says_by_which(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await open_weights(app, pilot, "gpu-1")
            await wait_until(pilot, lambda: len(rows(app)) == 2)
            head = plain(app.screen.query_one("#weights-head", Static).content)
            assert "node gpu-1: 12.0 GiB of 100 GiB limit (30% of disk), 300 GiB free" in head
            # Newest use first: the bottom row is the one the node gives up first.
            assert [r[:4] for r in rows(app)] == [
                ["llama", "5.0 GiB", "2 h ago", "llama-7c1f"],
                ["old-model", "7.0 GiB", "2 d ago", "unused"],
            ]
            await pilot.press("x")  # the cursor is on llama, in use
            await wait_until(pilot, lambda: type(app.screen).__name__ == "Confirm")
            assert "in use by llama-7c1f: it will be kept" in plain(
                app.screen.query_one("#confirm-box Static", Static).content
            )
            await pilot.press("y")
            await wait_until(pilot, lambda: "Kept llama" in status(app))
            assert "Nothing removed from gpu-1." in status(app)
            assert "Kept llama: in use by replica llama-7c1f" in status(app)
            assert len(rows(app)) == 2

            await pilot.press("down", "x")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "Confirm")
            await pilot.press("y")
            await wait_until(pilot, lambda: "Removed from gpu-1: old-model" in status(app))
            assert "(7.0 GiB freed)" in status(app)
            await wait_until(pilot, lambda: [r[0] for r in rows(app)] == ["llama"])
    assert [list(r.keys) for r in server.service.removals] == [["llama"], ["old-model"]]


async def test_a_node_that_has_not_reported_says_so_and_offers_nothing_to_remove(server):
    async with server.client() as client:
        app = LlmgwApp(client, first_screen="nodes")
        async with app.run_test(size=SIZE) as pilot:
            await open_weights(app, pilot, "gpu-2")
            head = app.screen.query_one("#weights-head", Static)
            await wait_until(pilot, lambda: "has not said" in plain(head.content))
            assert "node gpu-2: has not said what its weights cache holds yet" in plain(
                head.content
            )
            assert app.screen.check_action("remove", ()) is None
            await pilot.press("escape")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "NodesScreen")
    assert not server.service.removals
