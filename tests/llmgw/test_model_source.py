"""Model sources as operators write them: whole Hugging Face repositories, files of them, paths."""

from __future__ import annotations

import pytest

from llmgw.catalog.model import Model, ModelSource
from llmgw.present.modelfmt import name_from_source

COMMIT = "a" * 40


@pytest.mark.parametrize(
    ("text", "repo", "revision", "file"),
    [
        ("hf:org/repo", "org/repo", "", ""),
        ("hf:Qwen/Qwen2.5-0.5B-Instruct@main", "Qwen/Qwen2.5-0.5B-Instruct", "main", ""),
        (f"hf:org/repo@{COMMIT}", "org/repo", COMMIT, ""),
        ("hf:org/repo:model.Q4_K_M.gguf", "org/repo", "", "model.Q4_K_M.gguf"),
        ("hf:org/repo@refs/pr/1:sub/model.gguf", "org/repo", "refs/pr/1", "sub/model.gguf"),
    ],
)
def test_hf_sources_name_a_whole_repository_or_one_file_of_it(text, repo, revision, file):
    src = ModelSource.parse(text)
    assert (src.location, src.revision, src.file) == (repo, revision, file)
    assert src.is_repo is (not file)
    assert str(src) == text  # shown as the operator wrote it


@pytest.mark.parametrize(
    "text",
    [
        "hf:org",
        "hf:org/repo/extra",
        "hf:org/repo:",
        "hf:org/repo@:model.gguf",
        "hf:.org/repo",
        "hf:org/..",
        "hf:org/repo@../../etc",
        "hf:org/repo:../escape.gguf",
        "hf:org/repo:sub/.hidden",
        "hf:org/re po",
    ],
)
def test_hf_names_are_checked_one_plain_path_element_each(text):
    with pytest.raises(ValueError):
        ModelSource.parse(text)


def test_a_pinned_commit_is_where_nodes_fetch_from_and_the_source_stays_for_display():
    model = Model(
        name="tiny", source="hf:org/tiny", commit=COMMIT.upper(), profiles=[{"engine": "vllm"}]
    )
    assert model.commit == COMMIT and model.source == "hf:org/tiny"
    assert str(model.fetch_source) == f"hf:org/tiny@{COMMIT}"
    gguf = Model(name="g", source="hf:org/r@v1:m.gguf", commit=COMMIT)
    assert str(gguf.fetch_source) == f"hf:org/r@{COMMIT}:m.gguf"
    assert str(Model(name="l", source="/m.gguf").fetch_source) == "file:///m.gguf"
    with pytest.raises(ValueError, match="40 hex digits"):
        Model(name="x", source="hf:org/tiny", commit="main")


def test_a_repositorys_name_names_the_model():
    assert name_from_source("hf:Qwen/Qwen2.5-0.5B-Instruct") == "qwen2.5-0.5b-instruct"


def test_precision_is_for_the_engines_that_quantize():
    Model(name="v", source="hf:org/tiny", profiles=[{"engine": "vllm", "precision": "fp8"}])
    Model(name="s", source="hf:org/tiny", profiles=[{"engine": "sglang", "precision": "bf16"}])
    with pytest.raises(ValueError, match="precision fp8 is refused for llama.cpp"):
        Model(name="l", source="/m.gguf", profiles=[{"engine": "llama.cpp", "precision": "fp8"}])
