"""Engines the control plane asks nodes to have: their state in the node's own words."""

from __future__ import annotations

import hashlib

import pytest
from aiohttp import web

from gatewayd.admin.views import model_spec
from llmgw.catalog import Model, Profile
from llmgw.config import EngineRelease
from tests.cluster_fixture import running_cluster, wait_for


@pytest.fixture
async def release_host():
    """A local release host serving one archive (whose digest will not match)."""
    data = b"not really a llama.cpp release"

    async def serve(_request: web.Request) -> web.Response:
        return web.Response(body=data)

    app = web.Application()
    app.router.add_get("/llama-b9999-bin-linux-x64.tar.gz", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/llama-b9999-bin-linux-x64.tar.gz", data
    await runner.cleanup()


async def test_a_failed_engine_install_reaches_ctl_engines_and_the_placement_reasons(
    tmp_path, release_host
):
    url, data = release_host
    wrong = hashlib.sha256(data + b"tampered").hexdigest()
    release = EngineRelease(
        engine="llama.cpp", version="b9999", variant="cpu", url=url, sha256=wrong
    )
    async with running_cluster(tmp_path, engines=[release]) as cluster:
        await cluster.start_agent("cpu-node")

        async def failed():
            async with cluster.admin() as admin:
                engines = (await admin.list_engines()).engines
            return [e for e in engines if e.engine == "llama.cpp" and e.state == "failed"]

        (engine,) = await wait_for(failed, attempts=400)
        assert engine.node_id == "cpu-node" and engine.version == "b9999"
        assert "sha256" in engine.message
        # Nothing half-installed is left where engines live.
        assert not list((cluster.paths.engines_dir / "llama.cpp").glob("b9999*"))

        model = Model(
            name="needs-llama",
            source="/models/x.gguf",
            profiles=[Profile(engine="llama.cpp", cpu=True)],
        )
        async with cluster.admin() as admin:
            await admin.put_model(model_spec(model))
            explained = await admin.explain_placement("needs-llama")
        reasons = {n.node_id: n.reason for n in explained.reasons}
        assert "sha256" in reasons["cpu-node"]
