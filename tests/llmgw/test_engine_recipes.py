"""Engine recipes in server.yaml: what a node could not build from is refused when it is read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmgw.config import EngineRelease
from llmgw.engines.recipes import install_message, recipe_for

HASHED = "vllm==0.11.0 --hash=sha256:" + "a" * 64 + "\n"


def vllm(**kw) -> EngineRelease:
    fields = {
        "engine": "vllm",
        "version": "0.11.0",
        "source": "pyenv",
        "released": "2025-10-02T18:05:00Z",
        "requirements": {"cu129": HASHED},
    }
    fields.update(kw)
    return EngineRelease(**fields)


def test_a_recipe_travels_whole_in_install_engine():
    msg = install_message(vllm(index_url="https://mirror.example/simple", python="3.12"))
    assert (msg.engine, msg.version, msg.source) == ("vllm", "0.11.0", "pyenv")
    assert msg.released == "2025-10-02T18:05:00Z"
    assert msg.requirements == {"cu129": HASHED}
    assert (msg.index_url, msg.python) == ("https://mirror.example/simple", "3.12")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"source": "archive"}, "set source: pyenv"),
        ({"released": "last tuesday"}, "is not a time like"),
        ({"requirements": {}}, "has no requirements"),
        ({"requirements": {"cuda12": HASHED}}, "is not a CUDA build like cu129"),
        ({"requirements": {"cu129": "vllm==0.11.0\n"}}, "--require-hashes"),
        ({"python": "python3"}, "is not a Python version"),
        ({"engine": "llama.cpp"}, "source: pyenv is for vllm and sglang"),
    ],
)
def test_a_recipe_a_node_could_not_build_from_is_refused_in_plain_words(fields, words):
    with pytest.raises(ValidationError, match=words):
        vllm(**fields)


def test_a_profile_without_a_version_takes_the_first_recipe_of_its_engine():
    releases = [vllm(), vllm(version="0.12.0")]
    assert recipe_for(releases, "vllm").version == "0.11.0"
    assert recipe_for(releases, "vllm", "0.12.0").version == "0.12.0"
    assert recipe_for(releases, "sglang") is None
