"""The issue's acceptance, in-process: an hf: GGUF on the cluster's mirror, planned from it and
served by real llama.cpp from weights the agent fetched from it, the hub never reachable."""

from __future__ import annotations

import contextlib
import os
import signal

import httpx

from gatewayd.admin.views import model_spec
from llmgw.setup import starter
from proto.llmgw.v1 import PlanModelRequest
from tests.cluster_fixture import running_cluster, wait_for
from tests.engine_access import replica_headers

REPO = "google/gemma-3-270m-gguf"
FILE = "gemma-3-270m-Q4_K_M.gguf"


async def test_an_hf_gguf_on_the_mirror_is_planned_and_served_from_it(
    tmp_path, mirror, gemma3_270m_gguf
):
    rev = mirror.put_model(REPO, {FILE: gemma3_270m_gguf.read_bytes()})
    read_file = tmp_path / "mirror-read-token"
    read_file.write_text(mirror.read_token + "\n")
    admin_file = tmp_path / "mirror-admin-token"
    admin_file.write_text(mirror.admin_token + "\n")

    def configure(cfg):
        cfg.mirror.urls = [mirror.url]
        cfg.mirror.read_token_file = str(read_file)
        cfg.mirror.admin_token_file = str(admin_file)
        # No internet here: a hub that is asked would fail the test.
        cfg.hub_url = "http://127.0.0.1:9"

    source = f"hf:{REPO}:{FILE}"
    async with running_cluster(tmp_path, configure=configure) as cluster:
        try:
            agent_cfg = cluster.agent_config("cpu-node")
            agent_cfg.hub_url = "http://127.0.0.1:9"
            await cluster.start_agent("cpu-node", cfg=agent_cfg)
            model = starter.model(gemma3_270m_gguf).model_copy(
                update={"name": "gemma", "source": source, "sha256": ""}
            )
            async with cluster.admin() as admin:
                plan = await admin.plan_model(PlanModelRequest(source=source, engine="llama.cpp"))
                view = await admin.put_model(model_spec(model), create_only=True)

            async def ready():
                async with cluster.admin() as admin:
                    rs = (await admin.list_replicas("gemma")).replicas
                return rs[0] if rs and rs[0].state == "ready" else None

            r = await wait_for(ready, attempts=1200, interval_s=0.1)
            # In through the replica's door, with the replica's own key (as the gateway goes).
            door_headers = replica_headers(cluster.paths.secrets_dir, r)
            async with httpx.AsyncClient(base_url=r.endpoint, timeout=60) as http:
                answer = await http.post(
                    "/v1/chat/completions",
                    headers=door_headers,
                    json={
                        "model": "gemma",
                        "max_tokens": 4,
                        "temperature": 0,
                        "messages": [{"role": "user", "content": "Say hello"}],
                    },
                )
        finally:
            for replica in cluster.server.reconciler.replicas.values():
                if replica.pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(replica.pid, signal.SIGTERM)
    # Planned from the mirror's copy of the header: its real size.
    assert plan.facts.weights_bytes == gemma3_270m_gguf.stat().st_size
    assert not any("size is unknown" in n for n in plan.notes)
    # Pinned to the commit the mirror holds.
    assert view.spec.commit == rev.commit
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] > 0
