"""Nodes are told the cluster's mirrors: StartShard's weights and InstallEngine, up ones first."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from gatewayd.catalog.catalog import Catalog
from gatewayd.controller.reconciler import Reconciler
from gatewayd.controller.sizing import Sizing
from gatewayd.mirrors.set import MirrorSet
from gatewayd.nodes.registry import NodeRegistry
from gatewayd.store import SqliteStore
from llmgw.config import EngineRelease
from llmgw.inventory import Inventory, gpu_to_proto, host_to_proto
from llmgw.mirror.config import MirrorsConfig
from proto.llmgw.v1 import CommandAck, ControlMessage, Register
from tests.llmgw.modelplan.test_gguf_meta import write_gguf

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"
ARCHIVE_SHA = "e" * 64


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def _cluster(tmp_path: Path, mirrors: MirrorSet, sent: list[ControlMessage]):
    store = SqliteStore(tmp_path / "gw.db")
    await store.open()
    registry = NodeRegistry(store, not_ready_grace_s=15)
    catalog = Catalog(store, registry.watch, hub_url=_dead_url(), mirrors=mirrors)
    release = EngineRelease(
        engine="llama.cpp", version="b1", url="https://example.invalid/l.zip", sha256=ARCHIVE_SHA
    )
    reconciler = Reconciler(
        store,
        registry,
        catalog,
        engine_key="k",
        sizing=Sizing(hub_url=_dead_url(), mirrors=mirrors),
        engines=[release],
        mirrors=mirrors,
    )
    inv = Inventory.model_validate_json((FIXTURES / "cpu_only_16c.json").read_text())
    session = await registry.register(
        Register(
            node_id="cpu-1",
            hostname="cpu-1",
            host=host_to_proto(inv.host),
            gpus=[gpu_to_proto(g) for g in inv.gpus],
            installable_engines=["llama.cpp"],
        ),
        address="127.0.0.1",
    )

    def ack(msg: ControlMessage):
        # The agent: keeps what it was told and takes it at once.
        sent.append(msg)
        asyncio.get_running_loop().call_soon(
            registry.acked, CommandAck(command_id=msg.command_id, ok=True)
        )

    registry.bind_session("cpu-1", session, lambda _why: None, ack)
    return store, catalog, reconciler


async def test_a_replica_of_an_hf_model_is_started_with_the_mirrors_up_first_and_the_token(
    mirror, tmp_path
):
    rev = mirror.put_model("org/m", {"m.gguf": write_gguf(tmp_path / "m.gguf").read_bytes()})
    dead = _dead_url()
    mirrors = MirrorSet(MirrorsConfig(urls=[dead, mirror.url]), read_token=mirror.read_token)
    sent: list[ControlMessage] = []
    store, catalog, reconciler = await _cluster(tmp_path, mirrors, sent)
    try:
        await mirrors.probe_once()
        await catalog.put(
            {
                "name": "m",
                "source": "hf:org/m:m.gguf",
                "profiles": [{"engine": "llama.cpp", "cpu": True}],
                "allow_internet": True,
            }
        )
        await reconciler.reconcile_once()
        await reconciler.install_engines("cpu-1")
    finally:
        await store.close()
        await mirrors.aclose()
    (start,) = [m.start_shard for m in sent if m.start_shard is not None]
    w = start.weights
    assert w.source == f"hf:org/m@{rev.commit}:m.gguf"
    # The one that answered first, then the one down: a node may reach what gatewayd cannot.
    assert list(w.mirror_urls) == [mirror.url, dead]
    assert w.mirror_token == mirror.read_token and w.allow_internet
    (install,) = [m.install_engine for m in sent if m.install_engine is not None]
    assert install.sha256 == ARCHIVE_SHA
    assert list(install.mirror_urls) == [mirror.url, dead]
    assert install.mirror_token == mirror.read_token


async def test_a_local_model_is_started_without_mirrors(mirror, tmp_path):
    mirrors = MirrorSet(MirrorsConfig(urls=[mirror.url]), read_token=mirror.read_token)
    sent: list[ControlMessage] = []
    store, catalog, reconciler = await _cluster(tmp_path, mirrors, sent)
    try:
        local = write_gguf(tmp_path / "local.gguf")
        await catalog.put(
            {
                "name": "l",
                "source": str(local),
                "profiles": [{"engine": "llama.cpp", "cpu": True}],
            }
        )
        await reconciler.reconcile_once()
    finally:
        await store.close()
        await mirrors.aclose()
    (start,) = [m.start_shard for m in sent if m.start_shard is not None]
    assert list(start.weights.mirror_urls) == [] and start.weights.mirror_token == ""


async def test_a_python_engine_recipe_is_sent_with_the_mirrors_too(mirror, tmp_path):
    # Its wheels are pinned by their hashes, so a mirror's index may serve them.
    from llmgw.engines.builtin_recipes import builtin_releases

    mirrors = MirrorSet(MirrorsConfig(urls=[mirror.url]), read_token=mirror.read_token)
    sent: list[ControlMessage] = []
    store, _, reconciler = await _cluster(tmp_path, mirrors, sent)
    try:
        await mirrors.probe_once()
        vllm = next(r for r in builtin_releases() if r.engine == "vllm")
        msg = reconciler._install_message(vllm)
    finally:
        await store.close()
        await mirrors.aclose()
    assert msg.source == "pyenv"
    assert list(msg.mirror_urls) == [mirror.url] and msg.mirror_token == mirror.read_token
