"""The control plane plans a hub repository from its config and shard headers, per commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatewayd.controller.sizing import Sizing
from llmgw.catalog import Model
from llmgw.errors import UsageError
from llmgw.hub import RepoNotFound
from llmgw.inventory import Inventory
from llmgw.modelplan.plan import plan_model
from llmgw.modelplan.types import ModelFacts
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

REPO = make_tiny_repo()
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"


def _inventory(name: str) -> Inventory:
    return Inventory.model_validate_json((FIXTURES / f"{name}.json").read_text())


def _model(source: str, commit: str = "", **profile) -> Model:
    return Model(
        name="tiny", source=source, commit=commit, profiles=[{"engine": "vllm", **profile}]
    )


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def test_a_repository_is_planned_with_its_real_parameter_count(hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    sizing = Sizing(hub_url=hub.url)
    model = _model("hf:org/tiny", commit)
    assert sizing.facts(model) is None  # nothing asked of the hub until learn()
    facts = await sizing.learn(model)
    assert facts.parameters == REPO.parameters and facts.weights_bytes == REPO.weights_bytes
    plan = sizing.plan(model, model.profiles[0], [_inventory("a100_40g_x2_nvlink")])
    assert plan.facts.parameters == REPO.parameters and plan.facts.quantisation == "BF16"
    assert plan.layouts and plan.layouts[0].per_card.weights_bytes == REPO.weights_bytes
    assert plan.context == 4096  # the trained context of its config


async def test_facts_are_read_once_per_commit(hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    sizing = Sizing(hub_url=hub.url)
    await sizing.learn(_model("hf:org/tiny", commit))
    reads = len(hub.requests)
    other = Model(
        name="other", source="hf:org/tiny", commit=commit, profiles=[{"engine": "sglang"}]
    )
    await sizing.learn(other)
    await sizing.learn(_model("hf:org/tiny", commit))
    assert len(hub.requests) == reads


async def test_fp8_halves_a_bf16_models_weights_for_vllm(hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    sizing = Sizing(hub_url=hub.url)
    model = _model("hf:org/tiny", commit, precision="fp8")
    await sizing.learn(model)
    plan = sizing.plan(model, model.profiles[0], [_inventory("a100_40g_x2_nvlink")])
    assert plan.facts.weights_bytes == REPO.weights_bytes // 2
    assert plan.facts.quantisation == "FP8"
    assert any("weights planned at fp8" in n for n in plan.notes)


def test_precision_is_refused_for_engines_that_cannot_quantize():
    facts = ModelFacts(format="gguf", weights_bytes=1 << 30, parameters=1 << 29, layers=4)
    with pytest.raises(UsageError, match="precision fp8 is refused for llama.cpp"):
        plan_model(facts, engine="llama.cpp", precision="fp8")
    with pytest.raises(ValueError, match="the sim engine loads no weights"):
        Model(name="s", source="/m.gguf", profiles=[{"engine": "sim", "precision": "bf16"}])


async def test_a_repository_the_hub_cannot_tell_is_sized_from_its_profile_saying_why(hub):
    sizing = Sizing(hub_url=hub.url)
    model = _model("hf:org/nope")
    assert await sizing.learn(model) is None
    plan = sizing.plan(model, model.profiles[0])
    assert "size is unknown" in plan.notes[0] and "org/nope is not a repository" in plan.notes[0]
    with pytest.raises(RepoNotFound):
        await sizing.learn(model, strict=True)


def test_a_local_model_directory_the_control_plane_sees_is_planned_from_its_headers(tmp_path):
    d = REPO.write(tmp_path / "tiny")
    model = Model(name="tiny", source=str(d), profiles=[{"engine": "vllm"}])
    facts = Sizing().facts(model)
    assert facts is not None and facts.parameters == REPO.parameters
