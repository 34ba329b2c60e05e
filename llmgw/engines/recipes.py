"""Engine recipes: what the control plane tells a node to install, and how.

A recipe is one ``engines:`` entry of server.yaml (``llmgw.config.EngineRelease``).
For vLLM and SGLang (``source: pyenv``) it is everything uv needs to build
the same environment on every node, and nothing a node could be talked
into widening:

    engines:
      - engine: vllm
        version: 0.11.0
        source: pyenv
        released: "2025-10-02T18:05:00Z"   # when the version reached the index
        python: "3.12"
        index_url: ""                      # PyPI; or a mirror that keeps upload times
        requirements:                      # per CUDA build, every line pinned and hashed
          cu129: |
            vllm==0.11.0 --hash=sha256:…
            torch==2.8.0 --hash=sha256:…
          cu128: |
            …

The node picks the build its driver and compute capability run, resolves
as the index stood a day after ``released`` (``--exclude-newer``) with
``--require-hashes``, and refuses any line that is not ``name==version``
with hashes (agentd/provision/pyenv.py checks that again on the node).

llmgw ships a recipe of its own for each (llmgw/engines/builtin_recipes/, written by
scripts/engine_recipe.py): where server.yaml has no entry for an engine,
that one is used; an entry for the engine replaces it (``in_use``).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from proto.llmgw.v1 import EngineView, InstallEngine

if TYPE_CHECKING:
    from llmgw.config import EngineRelease

# The engines built as Python environments from a recipe.
PYTHON_ENGINES = ("vllm", "sglang")
_BUILD_TAG = re.compile(r"cu\d{3}")
# Where a recipe in force came from.
FROM_CONFIG = "server.yaml"
BUILT_IN = "built into llmgw"
# How ctl engines shows a recipe: a row of its own, with no node.
RECIPE_STATE = "recipe"


def check_release(release: EngineRelease) -> None:
    """ValueError, in plain words, for a recipe a node could not build from."""
    if release.source != "pyenv":
        if release.engine in PYTHON_ENGINES:
            raise ValueError(
                f"{release.engine} is installed from a recipe: set source: pyenv with "
                "released, requirements (per CUDA build) and, for a mirror, index_url"
            )
        return
    if release.engine not in PYTHON_ENGINES:
        raise ValueError(
            f"source: pyenv is for {' and '.join(PYTHON_ENGINES)}, not {release.engine}"
        )
    try:
        datetime.fromisoformat(release.released.strip())
    except ValueError:
        raise ValueError(
            f"released {release.released!r} is not a time like 2025-10-02T18:05:00Z "
            f"(when {release.engine} {release.version} was published)"
        ) from None
    if not release.requirements:
        raise ValueError(
            f"{release.engine} {release.version} has no requirements: give hashed "
            "requirements per CUDA build (cu129: |, cu128: |, …)"
        )
    for tag, text in release.requirements.items():
        if not _BUILD_TAG.fullmatch(tag):
            raise ValueError(f"requirements key {tag!r} is not a CUDA build like cu129")
        if "--hash=sha256:" not in text:
            raise ValueError(
                f"the {tag} requirements of {release.engine} {release.version} carry no "
                "--hash=sha256: lines; nodes install with --require-hashes"
            )
    if not re.fullmatch(r"3\.\d{1,2}", release.python):
        raise ValueError(f"python {release.python!r} is not a Python version like 3.12")


def recipe_for(
    releases: Iterable[EngineRelease], engine: str, version: str = ""
) -> EngineRelease | None:
    """The recipe for ``engine`` ``version``; with no version, the first one for the engine."""
    for release in releases:
        if release.engine == engine and (not version or release.version == version):
            return release
    return None


def install_message(release: EngineRelease) -> InstallEngine:
    """The InstallEngine a node is sent for ``release``."""
    return InstallEngine(
        engine=release.engine,
        version=release.version,
        variant=release.variant,
        source=release.source,
        url=release.url,
        sha256=release.sha256,
        released=release.released,
        requirements=dict(release.requirements),
        index_url=release.index_url,
        python=release.python,
    )


@dataclass(frozen=True)
class RecipeInUse:
    release: EngineRelease
    origin: str  # FROM_CONFIG or BUILT_IN


def in_use(
    configured: Iterable[EngineRelease], builtin: Iterable[EngineRelease]
) -> list[RecipeInUse]:
    """The recipes in force: server.yaml's, then llmgw's own for each engine it names none of.

    An operator's entry for an engine replaces the built-in recipe whatever
    its version: the built-in one is what a fresh install uses, not a floor.
    """
    configured = list(configured)
    named = {r.engine for r in configured}
    out = [RecipeInUse(r, FROM_CONFIG) for r in configured]
    out += [RecipeInUse(r, BUILT_IN) for r in builtin if r.engine not in named]
    return out


def recipe_view(use: RecipeInUse, files: Mapping[str, str] | None = None) -> EngineView:
    """A recipe as ``ctl engines`` lists it: no node, and where it came from in its words.

    ``files`` names the shipped file of each build of a built-in recipe.
    """
    r = use.release
    words = use.origin
    if use.origin == BUILT_IN and files:
        words += f" ({', '.join(files[t] for t in sorted(files))})"
    if r.source == "pyenv":
        index = r.index_url or "PyPI"
        words += f"; resolved from {index} as it stood at {resolved_as_of(r.released)}"
    return EngineView(
        node_id="",
        engine=r.engine,
        version=r.version,
        variant=",".join(sorted(r.requirements)) or r.variant,
        state=RECIPE_STATE,
        message=words,
    )


def resolved_as_of(released: str) -> str:
    """A day after ``released``: the ``--exclude-newer`` a node installs with, in UTC."""
    when = datetime.fromisoformat(released.strip())
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when.astimezone(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
