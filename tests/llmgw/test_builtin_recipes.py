"""The vLLM and SGLang recipes llmgw ships: buildable as a node builds them, and used where
server.yaml names none.

No network: the shipped files are read as they are, and the cluster test's
node refuses the recipe on its driver (R535) before uv would reach PyPI.
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import pytest
import yaml

from agentd.provision.pyenv import (
    CUDA_BUILDS,
    PYPI,
    PyEnvSource,
    check_requirements,
    uv_commands,
)
from llmgw.config import EngineRelease
from llmgw.engines.builtin_recipes import builtin_files, builtin_releases
from llmgw.engines.recipes import (
    BUILT_IN,
    FROM_CONFIG,
    RECIPE_STATE,
    in_use,
    install_message,
    recipe_for,
    recipe_view,
)
from llmgw.present.modelfmt import serve_spec
from tests.cluster_fixture import running_cluster, wait_for
from tests.fakes.engines.fixtures import a100_pair_fixture_file
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

RECIPES = Path(str(resources.files("llmgw.engines.builtin_recipes")))
BUILT = {r.engine: r for r in builtin_releases()}
KNOWN_BUILDS = {b.tag for b in CUDA_BUILDS}


def test_llmgw_ships_a_recipe_for_vllm_and_for_sglang():
    assert set(BUILT) == {"vllm", "sglang"}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_shipped_file_passes_the_nodes_check_and_pins_the_engine_at_its_version(engine):
    release = BUILT[engine]
    assert release.requirements and set(release.requirements) <= KNOWN_BUILDS
    for text in release.requirements.values():
        pins = {name.lower(): version for name, version in check_requirements(text)}
        assert pins[engine] == release.version
        assert "torch" in pins  # the whole environment, not the engine alone


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_shipped_recipe_names_no_index_and_installs_from_pypi_alone(engine):
    release = BUILT[engine]
    assert release.index_url == ""
    for tag, text in release.requirements.items():
        assert "index-url" not in text and "find-links" not in text
        pins = check_requirements(text)
        # No torch "+cu130" label: nothing asks for PyTorch's own index.
        assert not [v for _, v in pins if "+" in v]
        build = next(b for b in CUDA_BUILDS if b.tag == tag)
        source = PyEnvSource(datetime.fromisoformat(release.released), release.requirements)
        _, install = uv_commands("uv", Path("/e/venv"), Path("/e/req.txt"), source, build, pins)
        assert install[install.index("--index-url") + 1] == PYPI
        assert "--extra-index-url" not in install


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_shipped_recipe_carries_when_its_engine_reached_pypi(engine):
    release = BUILT[engine]
    released = datetime.fromisoformat(release.released)
    assert released.tzinfo is not None
    assert datetime(2025, 1, 1, tzinfo=UTC) < released < datetime.now(UTC)
    assert release.python == "3.12"


def test_every_file_among_the_recipes_is_named_by_the_index():
    index = yaml.safe_load((RECIPES / "index.yaml").read_text())
    named = {name for entry in index.values() for name in entry["requirements"].values()}
    assert named == {p.name for p in RECIPES.glob("*.txt")}
    for engine, entry in index.items():
        for tag, name in entry["requirements"].items():
            assert name == f"{engine}-{entry['version']}-{tag}.txt"


def test_the_packaging_ships_the_recipes_in_the_wheel():
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    text = pyproject.read_text()
    assert '"llmgw.engines.builtin_recipes" = ["index.yaml", "*.txt"]' in text


def operator_vllm(version: str = "0.11.0") -> EngineRelease:
    return EngineRelease(
        engine="vllm",
        version=version,
        source="pyenv",
        released="2025-10-02T18:05:00Z",
        requirements={"cu129": "vllm==0.11.0 --hash=sha256:" + "a" * 64 + "\n"},
        index_url="https://mirror.example/simple",
    )


def test_with_no_engines_setting_the_built_in_recipes_are_in_force():
    used = in_use([], builtin_releases())
    assert {(u.release.engine, u.origin) for u in used} == {
        ("vllm", BUILT_IN),
        ("sglang", BUILT_IN),
    }
    assert recipe_for([u.release for u in used], "vllm").version == BUILT["vllm"].version


def test_an_operators_entry_replaces_the_built_in_recipe_of_its_engine_only():
    used = in_use([operator_vllm()], builtin_releases())
    by_engine = {u.release.engine: u for u in used}
    assert (by_engine["vllm"].release.version, by_engine["vllm"].origin) == ("0.11.0", FROM_CONFIG)
    assert by_engine["sglang"].origin == BUILT_IN
    # A profile asking for the built-in version no longer gets it: the operator chose.
    assert recipe_for([u.release for u in used], "vllm", BUILT["vllm"].version) is None


def test_ctl_engines_says_which_recipe_is_in_force_and_where_it_came_from():
    (vllm,) = [u for u in in_use([], builtin_releases()) if u.release.engine == "vllm"]
    version = vllm.release.version
    view = recipe_view(vllm, builtin_files()[("vllm", version)])
    assert (view.node_id, view.engine, view.version, view.state) == (
        "",
        "vllm",
        version,
        RECIPE_STATE,
    )
    assert view.variant == "cu130"
    assert view.message.startswith(f"built into llmgw (vllm-{version}-cu130.txt)")
    assert "resolved from PyPI as it stood at" in view.message
    mine = recipe_view(in_use([operator_vllm()], [])[0])
    assert mine.message == (
        "server.yaml; resolved from https://mirror.example/simple as it stood at "
        "2025-10-03T18:05:00Z"
    )


def test_install_engine_carries_a_built_in_recipe_whole():
    release = BUILT["vllm"]
    msg = install_message(release)
    assert (msg.engine, msg.version, msg.source) == ("vllm", release.version, "pyenv")
    assert (msg.released, msg.index_url, msg.python) == (release.released, "", "3.12")
    assert msg.requirements == release.requirements


async def test_a_control_plane_with_no_engines_setting_sends_the_built_in_vllm_to_the_node(
    tmp_path,
):
    # The recorded A100 pair keeps its own driver (R535): it is sent the built-in
    # recipe with the replica and says, in its words, why the cu130 build cannot
    # run there, before uv would fetch anything.
    version = BUILT["vllm"].version
    async with FakeHub() as hub:
        hub.add_repo("org/tiny", make_tiny_repo().files)

        def configure(cfg):
            cfg.hub_url = hub.url

        async with running_cluster(tmp_path, configure=configure) as cluster:
            fixture = a100_pair_fixture_file(tmp_path / "a100-pair.json", driver="535.129.03")
            cfg = cluster.agent_config("a100-pair", fixture=str(fixture))
            cfg.hub_url = hub.url
            await cluster.start_agent("a100-pair", cfg=cfg)
            async with cluster.admin() as admin:
                recipes = [e for e in (await admin.list_engines()).engines if not e.node_id]
                assert {(e.engine, e.state) for e in recipes} == {
                    ("vllm", RECIPE_STATE),
                    ("sglang", RECIPE_STATE),
                }
                await admin.put_model(serve_spec("hf:org/tiny", name="tiny", engine="vllm", gpus=2))

            async def refused_on_the_node():
                async with cluster.admin() as admin:
                    engines = (await admin.list_engines()).engines
                return [e for e in engines if e.node_id == "a100-pair" and e.engine == "vllm"]

            async def failed():
                seen = await refused_on_the_node()
                return seen if seen and seen[0].state == "failed" else None

            (engine,) = await wait_for(failed, attempts=400)
        assert engine.version == version
        assert "driver 535 is older than what CUDA 13.0 needs" in engine.message
