"""A profile's cores: what the catalog accepts, and what the engines are given for them."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from agentd.engines.base import ShardSpec
from agentd.engines.llamacpp import LlamaCppAdapter
from agentd.engines.sim import SimAdapter
from llmgw.catalog.model import GpuNeed, Model, Profile


def test_a_models_yaml_gives_a_cpu_profile_its_cores():
    model = Model.model_validate(
        yaml.safe_load(
            """
            name: small
            source: /models/small.gguf
            profiles:
              - engine: llama.cpp
                cpu: true
                cores: 4
            """
        )
    )

    assert model.profiles[0].cores == 4


@pytest.mark.parametrize(
    ("profile", "said"),
    [
        (
            {"engine": "vllm", "cores": 2},
            "cores are reserved by replicas that run on CPU; this profile runs on GPUs",
        ),
        (
            {"engine": "llama.cpp", "gpu": GpuNeed(count=1), "cores": 2},
            "cores are reserved by replicas that run on CPU; this profile runs on GPUs",
        ),
        (
            {"engine": "llama.cpp", "cores": 2, "args": ["--threads=8"]},
            "give the threads as cores: 2, not --threads=8 in args",
        ),
        ({"engine": "llama.cpp", "cores": 2, "args": ["-t", "8"]}, "not -t in args"),
        ({"engine": "llama.cpp", "cores": -1}, "greater than or equal to 0"),
    ],
)
def test_cores_where_they_cannot_be_reserved_are_refused_in_words(profile, said):
    with pytest.raises(ValidationError, match=said):
        Profile(**profile)


def test_without_cores_threads_in_args_stay_the_operators_own():
    assert Profile(engine="llama.cpp", args=["--threads", "8"]).cores == 0


def _spec(threads: int, gpus: tuple[int, ...] = ()) -> ShardSpec:
    return ShardSpec(
        model_name="m", model_path="/w/m.gguf", port=8001, threads=threads, gpu_indexes=gpus
    )


def test_llama_server_is_given_the_cores_for_generation_and_prompts():
    argv = LlamaCppAdapter("llama-server").command(_spec(3)).argv

    at = argv.index("--threads")
    assert argv[at : at + 4] == ["--threads", "3", "--threads-batch", "3"]
    assert "--threads" not in LlamaCppAdapter("llama-server").command(_spec(0)).argv


def test_the_sim_is_told_its_cores_too():
    argv = SimAdapter().command(_spec(2)).argv

    assert argv[argv.index("--threads") + 1] == "2"
