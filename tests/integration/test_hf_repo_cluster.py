"""A hub repository added to a running cluster: pinned, planned from its headers, placed by them."""

from __future__ import annotations

import pytest

from proto.llmgw.v1 import ModelProfile, ModelSpec, PlanModelRequest
from tests.cluster_fixture import running_cluster, wait_for
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

REPO = make_tiny_repo()


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def test_a_repository_is_pinned_at_add_and_placed_with_its_real_size(tmp_path, hub):
    first = hub.add_repo("org/tiny", REPO.files)

    def point_at_hub(cfg):
        cfg.hub_url = hub.url

    async with running_cluster(tmp_path, configure=point_at_hub) as cluster:
        await cluster.start_agent("a100-box", fixture="a100_40g_x2_nvlink")
        spec = ModelSpec(
            name="tiny",
            source="hf:org/tiny",
            profiles=[ModelProfile(name="default", engine="vllm", startup_timeout_s=600)],
            slots=1,
            replicas_min=0,
            replicas_max=0,
        )
        async with cluster.admin() as admin:
            view = await admin.put_model(spec)
            assert view.spec.commit == first and view.spec.source == "hf:org/tiny"
            hub.commit("org/tiny", {"config.json": b'{"moved": true}'})

            async def placed_by_its_headers():
                reply = await admin.explain_placement("tiny")
                p = reply.placement
                if p and p.layout.per_card and p.layout.per_card.weights_bytes:
                    return p
                return None

            placement = await wait_for(placed_by_its_headers, attempts=200)
            assert placement.node_id == "a100-box"
            assert placement.layout.per_card.weights_bytes == REPO.weights_bytes
            # The plan an operator asks for reads the pinned commit, not the moved branch.
            plan = await admin.plan_model(PlanModelRequest(name="tiny"))
            assert plan.facts.parameters == REPO.parameters
            fp8 = await admin.plan_model(PlanModelRequest(name="tiny", precision="fp8"))
            assert fp8.facts.weights_bytes == REPO.weights_bytes // 2


async def test_a_replica_fetches_the_pinned_commit_from_the_agents_hub_after_the_branch_moved(
    tmp_path, hub
):
    first = hub.add_repo("org/tiny", REPO.files)

    def point_at_hub(cfg):
        cfg.hub_url = hub.url

    async with running_cluster(tmp_path, configure=point_at_hub) as cluster:
        cfg = cluster.agent_config("a100-box", fixture="a100_40g_x2_nvlink")
        cfg.hub_url = hub.url  # agent.yaml's hub_url: where the node fetches from
        await cluster.start_agent("a100-box", cfg=cfg)
        spec = ModelSpec(
            name="tiny",
            source="hf:org/tiny",
            profiles=[ModelProfile(name="default", engine="vllm", startup_timeout_s=600)],
            slots=1,
            replicas_min=0,
            replicas_max=0,
        )
        async with cluster.admin() as admin:
            await admin.put_model(spec)
            moved = hub.commit("org/tiny", {"config.json": b'{"moved": true}'})
            await admin.scale_model("tiny", 1)
            cache = cluster.paths.agent_data_dir / "a100-box" / "weights" / "hf" / "org" / "tiny"

            async def fetched():
                return (cache / first / ".llmgw-complete.json").is_file()

            await wait_for(fetched, attempts=400)
            replicas = (await admin.list_replicas("tiny")).replicas
        assert (cache / first / "config.json").read_bytes() == REPO.files["config.json"]
        assert not (cache / moved).exists()
        history = [e.reason for e in replicas[0].history]
        assert any(f"hf:org/tiny@{first}" in why for why in history), history
