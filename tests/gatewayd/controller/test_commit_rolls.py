"""A model's pinned commit is part of what its replicas run: a new pin replaces them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gatewayd.catalog.catalog import Catalog
from gatewayd.controller import replica as rs
from gatewayd.controller.reconciler import Reconciler, spec_hash
from gatewayd.controller.sizing import Sizing
from gatewayd.nodes.registry import NodeRegistry
from gatewayd.store import SqliteStore
from llmgw.catalog import Model
from llmgw.inventory import Inventory, gpu_to_proto, host_to_proto
from proto.llmgw.v1 import CommandAck, Register, ShardStatus
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

REPO = make_tiny_repo()
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def _cluster(tmp_path: Path, hub_url: str):
    store = SqliteStore(tmp_path / "gw.db")
    await store.open()
    registry = NodeRegistry(store, not_ready_grace_s=15)
    catalog = Catalog(store, registry.watch, hub_url=hub_url)
    reconciler = Reconciler(
        store, registry, catalog, engine_key="k", sizing=Sizing(hub_url=hub_url)
    )
    inv = Inventory.model_validate_json((FIXTURES / "a100_40g_x2_nvlink.json").read_text())
    session = await registry.register(
        Register(
            node_id="gpu-1",
            hostname="gpu-1",
            host=host_to_proto(inv.host),
            gpus=[gpu_to_proto(g) for g in inv.gpus],
            installable_engines=["vllm"],
        ),
        address="127.0.0.1",
    )

    def ack(msg):
        # The agent: takes every command at once.
        asyncio.get_running_loop().call_soon(
            registry.acked, CommandAck(command_id=msg.command_id, ok=True)
        )

    registry.bind_session("gpu-1", session, lambda _why: None, ack)
    return store, catalog, reconciler


async def _ready(reconciler: Reconciler, r) -> None:
    await reconciler.on_shard_status(
        r.node_id,
        ShardStatus(
            shard_id=r.shard_id, replica_id=r.replica_id, state="ready", reason="answers", port=1
        ),
    )


def test_the_spec_hash_of_a_model_changes_with_its_commit_only():
    # Guards: a re-pinned hf: model kept replicas serving the old commit's weights.
    a = Model(name="m", source="hf:org/tiny", commit="a" * 40, profiles=[{"engine": "vllm"}])
    b = a.model_copy(update={"commit": "b" * 40})
    assert spec_hash(a) != spec_hash(b)
    assert spec_hash(a) == spec_hash(a.model_copy(update={"replicas_min": 3}))


async def test_an_hf_model_added_again_at_a_new_commit_replaces_its_replica(hub, tmp_path):
    first = hub.add_repo("org/tiny", REPO.files)
    second = hub.commit("org/tiny", {"README.md": b"a newer card\n"})
    store, catalog, reconciler = await _cluster(tmp_path, hub.url)
    try:
        spec = {"name": "tiny", "source": "hf:org/tiny", "profiles": [{"engine": "vllm"}]}
        await catalog.put({**spec, "commit": first})
        await reconciler.reconcile_once()
        (old,) = reconciler.replicas.values()
        assert old.node_id == "gpu-1"
        await _ready(reconciler, old)

        await catalog.put({**spec, "commit": second})
        await reconciler.reconcile_once()
        (new,) = [r for r in reconciler.replicas.values() if r.replaces == old.replica_id]
        assert new.state == rs.PLACED and old.state == rs.READY  # new before old

        await _ready(reconciler, new)
        await reconciler.reconcile_once()
        assert old.state == rs.DRAINING
        assert "the model changed" in old.reason
    finally:
        await store.close()
