"""The vLLM and SGLang releases llmgw ships a recipe for: used where server.yaml names none.

``index.yaml`` names, per engine, the pinned version, when its wheel reached
PyPI, the Python it is built for and one requirements file per CUDA build
(``cu130: vllm-0.33.0-cu130.txt``); each file is every package of that
environment, ``name==version`` with the hashes of the Linux x86_64 files a
node can install, resolved by uv from PyPI alone as it stood a day after the
release. scripts/engine_recipe.py writes both; nothing here is edited by hand.

An operator's ``engines:`` entry for an engine replaces its built-in recipe
(llmgw.engine_recipes.in_use).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

from llmgw.config import EngineRelease

INDEX = "index.yaml"


@cache
def builtin_releases() -> tuple[EngineRelease, ...]:
    """The shipped recipes, read from the package's data once."""
    here = resources.files(__name__)
    index = yaml.safe_load(here.joinpath(INDEX).read_text()) or {}
    return tuple(
        EngineRelease(
            engine=engine,
            version=str(entry["version"]),
            source="pyenv",
            released=str(entry["released"]),
            python=str(entry["python"]),
            requirements={
                tag: here.joinpath(name).read_text() for tag, name in entry["requirements"].items()
            },
        )
        for engine, entry in sorted(index.items())
    )


@cache
def builtin_files() -> dict[tuple[str, str], dict[str, str]]:
    """(engine, version) -> {CUDA build: the file its requirements were read from}."""
    index = yaml.safe_load(resources.files(__name__).joinpath(INDEX).read_text()) or {}
    return {
        (engine, str(entry["version"])): dict(entry["requirements"])
        for engine, entry in index.items()
    }
