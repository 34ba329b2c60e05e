"""The control plane's side of the nodes' weights caches: what it reads from a report, and
what it refuses before a removal reaches a node.

The admin mixin runs against a registry, reconciler and catalog of plain objects holding
what the real ones hold (a node's NodeLive, replicas by id, models by name); the command
path to the node is a function answering as an agent does. The whole path, real agent
included: tests/integration/elastic/test_weights_cache.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.admin.weights import WeightsAdmin, covers, parse_lines
from gatewayd.nodes.registry import NodeLive
from gatewayd.nodes.weights import models_cached
from gatewayd.store import NodeRecord
from llmgw.catalog.model import Model
from proto.llmgw.v1 import (
    CachedWeights,
    CommandAck,
    ControlMessage,
    RemoveWeightsRequest,
    WeightsReport,
)

COMMIT = "c0ffee" * 6 + "c0ff"


def model(name: str, source: str) -> Model:
    return Model.model_validate(
        {"name": name, "source": source, "commit": COMMIT, "profiles": [{"name": "default"}]}
    )


def report(*entries: tuple[str, list[str]], partial: str = "") -> WeightsReport:
    return WeightsReport(
        entries=[
            CachedWeights(key=k, size_bytes=10, used_by=u, partial=k == partial) for k, u in entries
        ]
    )


def test_the_models_a_node_holds_whole_are_its_model_entries_and_repositories_at_their_commit():
    r = report(("llama", []), (f"hf/org/tiny/{COMMIT}", []), ("coming", []), partial="coming")
    catalog = [model("tiny", "hf:org/tiny"), model("other", "hf:org/other")]
    assert models_cached(r, catalog) == {"llama", "tiny"}
    assert models_cached(r) == {"llama"}  # without the catalog, repositories name no model
    assert models_cached(None, catalog) == set()


def test_a_name_covers_the_entries_under_it_and_the_nodes_lines_read_back():
    assert covers("hf/org/tiny", f"hf/org/tiny/{COMMIT}") and covers("llama", "llama")
    assert not covers("llama", "llama-2") and not covers("hf/org/tiny/c1", "hf/org/tiny")
    assert parse_lines(
        ["removed a 100", "kept b: in use by replica r-1", "removed hf/o/r/c 5"]
    ) == (
        ["a", "hf/o/r/c"],
        ["b: in use by replica r-1"],
        105,
    )


@dataclass
class Replica:
    replica_id: str
    model: str
    node_id: str
    state: str = "ready"


@dataclass
class Registry:
    nodes: dict[str, NodeLive]
    sent: list[ControlMessage] = field(default_factory=list)

    def live(self, node_id):
        return self.nodes.get(node_id)

    def live_nodes(self):
        return list(self.nodes.values())

    async def command(self, node_id, msg, *, timeout_s=30.0):
        # As an agent answers: every key removed (this one holds them all, unused).
        self.sent.append(msg)
        lines = [f"removed {k} 10" for k in msg.remove_weights.keys]
        return CommandAck(command_id="c1", ok=True, lines=lines)


@dataclass
class Catalog:
    models: dict[str, Model]

    def get(self, name):
        return self.models.get(name)


class Admin(WeightsAdmin):
    def __init__(self, registry, replicas, models) -> None:
        self._registry = registry
        self._reconciler = type("Reconciler", (), {"replicas": replicas})()
        self._catalog = Catalog(models)


def node(node_id: str, *, connected: bool = True) -> NodeLive:
    now = datetime.now(UTC)
    rec = NodeRecord(
        node_id=node_id, hostname=node_id, state="ready", state_since=now, registered_at=now
    )
    return NodeLive(record=rec, connected=connected)


@pytest.fixture
def admin():
    registry = Registry({"gpu-1": node("gpu-1"), "away": node("away", connected=False)})
    replicas = {
        "llama-7c1f": Replica("llama-7c1f", "llama", "gpu-1"),
        "tiny-05d2": Replica("tiny-05d2", "tiny", "gpu-1", state="placed"),  # not started yet
        "gone-e410": Replica("gone-e410", "gone", "gpu-1", state="stopped"),
        "llama-a93e": Replica("llama-a93e", "llama", "gpu-2"),
    }
    return Admin(registry, replicas, {"tiny": model("tiny", "hf:org/tiny")})


async def test_weights_a_replica_here_uses_are_refused_before_the_node_is_asked(admin):
    # The node has not reported: what the control plane knows is enough to keep them.
    reply = await admin.remove_weights(
        RemoveWeightsRequest(node_id="gpu-1", keys=["llama", "hf:org/tiny", "gone"])
    )
    assert reply.kept == [
        "llama: in use by replica llama-7c1f",
        "hf/org/tiny: in use by replica tiny-05d2",
    ]
    assert [list(m.remove_weights.keys) for m in admin._registry.sent] == [["gone"]]
    assert (reply.removed, reply.freed_bytes) == (["gone"], 10)


async def test_every_unused_entry_is_named_one_by_one_from_the_nodes_report(admin):
    live = admin._registry.nodes["gpu-1"]
    with pytest.raises(GRPCError) as unreported:
        await admin.remove_weights(RemoveWeightsRequest(node_id="gpu-1", unused=True))
    assert unreported.value.status == Status.FAILED_PRECONDITION
    assert "has not said what its weights cache holds yet" in unreported.value.message
    live.weights = report(
        ("llama", []),  # in use by a replica the control plane knows, not yet on the node
        (f"hf/org/tiny/{COMMIT}", []),
        ("old", []),
        ("busy", ["r-1"]),  # in use on the node
    )
    reply = await admin.remove_weights(RemoveWeightsRequest(node_id="gpu-1", unused=True))
    assert [list(m.remove_weights.keys) for m in admin._registry.sent] == [["old"]]
    assert sorted(reply.kept) == [
        "busy: in use by replica r-1",
        f"hf/org/tiny/{COMMIT}: in use by replica tiny-05d2",
        "llama: in use by replica llama-7c1f",
    ]


async def test_an_unknown_node_an_absent_one_and_nothing_named_are_refused_in_words(admin):
    cases = [
        (RemoveWeightsRequest(node_id="nope", keys=["x"]), Status.NOT_FOUND, "llmgw ctl nodes"),
        (RemoveWeightsRequest(node_id="away", keys=["x"]), Status.UNAVAILABLE, "not connected"),
        (RemoveWeightsRequest(node_id="gpu-1"), Status.INVALID_ARGUMENT, "--unused"),
    ]
    for request, status, words in cases:
        with pytest.raises(GRPCError) as refused:
            await admin.remove_weights(request)
        assert refused.value.status == status and words in refused.value.message
    assert not admin._registry.sent
