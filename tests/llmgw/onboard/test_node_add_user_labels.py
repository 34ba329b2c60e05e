"""``node add``'s engine user step and its labels, against the in-process asyncssh node.

Users are played by the fake node (getent, useradd, adduser): nothing is
made on this machine.
"""

from __future__ import annotations

import pytest
import yaml

from llmgw.onboard import AddPlan, SshTarget, add_node
from llmgw.onboard.checks import NodeFacts
from llmgw.onboard.engine_user import ENGINE_USER, ensure_engine_user
from llmgw.onboard.events import OnboardError
from llmgw.onboard.layout import NodeLayout
from llmgw.onboard.ssh import connect
from tests.llmgw.onboard.fake_node import Scenario, start_fake_node, stop_fake_node
from tests.llmgw.onboard.test_node_add import cp_paths, listening  # noqa: F401  (fixture)


def target(node) -> SshTarget:
    return SshTarget(
        host="127.0.0.1",
        port=node.port,
        user="root",
        identity=str(node.client_key_file),
        known_hosts=str(node.known_hosts_file),
    )


async def add(tmp_path, cp_paths, node, control_plane, **plan):  # noqa: F811
    full = AddPlan(
        target=target(node),
        paths=cp_paths,
        node_id="gpu-a-01",
        control_planes=[control_plane],
        install_root=str(tmp_path / "root"),
        lock_retry_s=0.05,
        register_timeout_s=2,
        **plan,
    )
    return [ev async for ev in add_node(full)]


def agent_yaml(tmp_path) -> dict:
    return yaml.safe_load((tmp_path / "root" / "etc" / "agent.yaml").read_text())


async def test_labels_given_to_node_add_are_in_agent_yaml_and_a_second_run_keeps_them(
    tmp_path,
    cp_paths,  # noqa: F811
):
    node = await start_fake_node(tmp_path, Scenario())
    try:
        async with listening() as cp:
            await add(tmp_path, cp_paths, node, cp, labels={"zone": "a", "llmgw.role": "judge"})
            assert agent_yaml(tmp_path)["labels"] == {"zone": "a", "llmgw.role": "judge"}

            await add(tmp_path, cp_paths, node, cp, labels={"rack": "r7", "zone": "b"})
    finally:
        await stop_fake_node(node)
    assert agent_yaml(tmp_path)["labels"] == {"zone": "b", "llmgw.role": "judge", "rack": "r7"}


async def test_under_an_install_root_node_add_leaves_making_the_engine_user_to_the_agent(
    tmp_path,
    cp_paths,  # noqa: F811
):
    node = await start_fake_node(tmp_path, Scenario())
    try:
        async with listening() as cp:
            events = await add(tmp_path, cp_paths, node, cp)
    finally:
        await stop_fake_node(node)
    (user,) = [ev for ev in events if ev.step == "user"]
    assert user.status == "kept"
    assert "under --install-root nothing outside it is changed" in user.detail
    assert not any(c.startswith(("useradd", "adduser")) for c in node.commands)
    names = [ev.step for ev in events]
    assert names.index("packages") < names.index("user") < names.index("join")


async def test_an_engine_user_already_on_the_node_is_kept(tmp_path, cp_paths):  # noqa: F811
    node = await start_fake_node(tmp_path, Scenario(users={ENGINE_USER: 997}))
    try:
        async with listening() as cp:
            events = await add(tmp_path, cp_paths, node, cp)
    finally:
        await stop_fake_node(node)
    (user,) = [ev for ev in events if ev.step == "user"]
    assert (user.status, user.detail) == (
        "kept",
        f"engines run as {ENGINE_USER} (uid 997), there already",
    )


async def run_step(tmp_path, scenario, os_release: dict[str, str]):
    node = await start_fake_node(tmp_path, scenario)
    shell = await connect(target(node))
    try:
        facts = NodeFacts(os_release=os_release)
        # The system layout: this step writes no file, it only runs (played) commands.
        events = [ev async for ev in ensure_engine_user(shell, facts, NodeLayout.for_root(""))]
    finally:
        await shell.close()
        await stop_fake_node(node)
    return events, node


async def test_on_a_debian_node_the_engine_user_is_made_with_useradd(tmp_path):
    events, node = await run_step(tmp_path, Scenario(), {"ID": "debian"})
    assert [ev.status for ev in events] == ["running", "ok"]
    assert (
        "useradd --system --user-group --no-create-home --home-dir "
        "/var/lib/llmgw-agent/engine-home --shell /usr/sbin/nologin llmgw-engine"
    ) in node.commands
    assert ENGINE_USER in node.scenario.users
    assert events[-1].detail == (
        f"created {ENGINE_USER}, a system user with no login, home /var/lib/llmgw-agent/engine-home"
    )


async def test_on_an_alpine_node_the_engine_user_is_made_with_busybox_adduser(tmp_path):
    events, node = await run_step(tmp_path, Scenario(), {"ID": "alpine"})
    assert events[-1].status == "ok"
    assert (
        "adduser -S -D -H -h /var/lib/llmgw-agent/engine-home -s /sbin/nologin llmgw-engine"
    ) in node.commands


async def test_an_engine_user_of_uid_0_stops_node_add_saying_how_to_fix_it(tmp_path):
    with pytest.raises(OnboardError, match="has uid 0: engines would run as root") as stopped:
        await run_step(tmp_path, Scenario(users={ENGINE_USER: 0}), {"ID": "debian"})
    assert "usermod -u" in stopped.value.hint
