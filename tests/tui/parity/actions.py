"""Each action of the cluster console, performed through the pilot and read back with the
command that shows its change (``ACTIONS``), for tests/tui/parity/test_parity.py."""

from __future__ import annotations

from textual.widgets import Checkbox, DataTable, Input, Select, Static

from llmgw.present.keyfmt import key_cells
from llmgw.present.modelfmt import (
    layout_cells,
    model_cells,
    plan_head,
    replica_cells,
)
from llmgw.present.nodefmt import node_cells
from proto.llmgw.v1 import (
    KeyView,
    ListKeysReply,
    ListModelsReply,
    ListNodesReply,
    ListReplicasReply,
    ListTenantsReply,
    NodeView,
    PlanReply,
)
from tests.cluster_fixture import wait_for
from tests.llmgw.onboard.fake_node import FakeNode, Scenario, start_fake_node, stop_fake_node
from tests.tui.parity.kit import (
    READY_ATTEMPTS,
    RESTARTED,
    SEARCH,
    SOURCE,
    Live,
    Step,
    _replica_of,
    agree,
    cells,
    check_log_tail,
    check_replica_details,
    check_usage,
    cursor_to,
    key_named,
    key_of,
    plain,
    press,
    screen_is,
    select_level,
    static_text,
    table_list,
    table_rows,
    to_add_node,
    to_keys,
    to_models,
    to_nodes,
    to_replica_details,
    to_replicas,
    to_serve,
    to_usage,
    tree_levels,
    until,
)
from tui.parity import PARITY, Item
from tui.screens.nodes.add_node import steps_table

# -- actions: perform through the pilot, read back with the command ------------------------


async def models_agree(app, pilot, live, item: Item) -> dict[str, list[str]]:
    async def said():
        reply = ListModelsReply.from_dict(await live.shown_by(item))
        return {m.spec.name: cells(model_cells(m)) for m in reply.models}

    return await agree(pilot, lambda: table_rows(app, "#models"), said)


async def do_scale(app, pilot, live):
    item = ("ModelsScreen", "scale")
    await to_models(app, pilot, live)
    await cursor_to(pilot, "#models", "parity-scale")
    await press(pilot, *item, "ScaleDialog")
    await pilot.press("end", "backspace", "1", "enter")
    await until(pilot, lambda: screen_is(app, "ModelsScreen"))

    async def scaled():
        reply = ListModelsReply.from_dict(await live.shown_by(item))
        return next(m for m in reply.models if m.spec.name == "parity-scale").replicas_desired

    await agree(pilot, lambda: 1, scaled)
    rows = await models_agree(app, pilot, live, item)
    assert rows["parity-scale"][2].endswith("/1")


async def do_remove(app, pilot, live):
    item = ("ModelsScreen", "remove")
    await to_models(app, pilot, live)
    await cursor_to(pilot, "#models", "parity-rm")
    await press(pilot, *item, "ConfirmRemove")
    await pilot.press("y")
    await until(pilot, lambda: "parity-rm" not in table_rows(app, "#models"))
    rows = await models_agree(app, pilot, live, item)
    assert "parity-rm" not in rows and "sim-chat" in rows


async def fill_serve(app, pilot, *, name: str = "") -> None:
    dialog = app.screen
    dialog.query_one("#serve-source", Input).value = SOURCE
    dialog.query_one("#serve-name", Input).value = name
    dialog.query_one("#serve-engine", Select).value = "sim"
    dialog.query_one("#serve-replicas", Input).value = "0"
    dialog.query_one("#serve-cpu", Checkbox).value = True
    await pilot.pause()


async def do_plan(app, pilot, live):
    item = ("ServeDialog", "plan")
    await to_serve(app, pilot, live)
    await fill_serve(app, pilot)
    await pilot.click("#serve-plan-button")
    layouts = app.screen.query_one("#serve-layouts", DataTable)
    await until(pilot, lambda: layouts.row_count > 0)

    async def said():
        reply = PlanReply.from_dict(await live.said(item, source=SOURCE, engine="sim"))
        return plain(plan_head(reply)), [list(layout_cells(lay)) for lay in reply.layouts]

    def shown():
        head = static_text(app, "#serve-plan").splitlines()[0]
        return head + "\n", table_list(app, "#serve-layouts")

    await agree(pilot, shown, said)


async def do_serve(app, pilot, live):
    item = ("ServeDialog", "serve")
    await to_serve(app, pilot, live)
    await fill_serve(app, pilot, name="parity-served")
    await pilot.click("#serve-button")
    await until(pilot, lambda: screen_is(app, "ModelsScreen"))
    rows = await models_agree(app, pilot, live, item)
    assert "parity-served" in rows
    reply = ListModelsReply.from_dict(await live.shown_by(item))
    served = next(m for m in reply.models if m.spec.name == "parity-served")
    profile = served.spec.profiles[0]
    assert (profile.engine, profile.cpu, served.replicas_desired) == ("sim", True, 0)
    assert served.spec.source == SOURCE


async def keys_agree(app, pilot, live, item: Item) -> dict[str, list[str]]:
    async def said():
        keys = ListKeysReply.from_dict(await live.shown_by(item)).keys
        shown_path = app.screen.shown_path
        return {
            k.key_id: cells(key_cells(k))
            for k in keys
            if not shown_path or k.project == shown_path or k.project.startswith(shown_path + "/")
        }

    return await agree(pilot, lambda: table_rows(app, "#keys"), said)


async def projects(live: Live, item: Item) -> list[str]:
    return [t.path for t in ListTenantsReply.from_dict(await live.shown_by(item)).tenants]


async def do_new_level(app, pilot, live):
    item = ("KeysScreen", "new_level")
    await to_keys(app, pilot, live)
    await press(pilot, *item, "LevelDialog")
    dialog = app.screen
    dialog.query_one("#level-path", Input).value = "Parity/made/here"
    dialog.query_one("#level-parents", Checkbox).value = True
    await pilot.click("#form-ok")
    await until(pilot, lambda: "Parity/made/here" in tree_levels(app))
    assert "Parity/made/here" in await projects(live, item)


async def do_rename(app, pilot, live):
    item = ("KeysScreen", "rename")
    await live.client.create_tenant("project", "Parity/rename/before", parents=True)
    await to_keys(app, pilot, live)
    await select_level(pilot, "Parity/rename/before")
    await press(pilot, *item, "RenameDialog")
    app.screen.query_one("#rename-name", Input).value = "after"
    await pilot.click("#form-ok")
    await until(pilot, lambda: "Parity/rename/after" in tree_levels(app))
    paths = await projects(live, item)
    assert "Parity/rename/after" in paths and "Parity/rename/before" not in paths


async def do_remove_level(app, pilot, live):
    item = ("KeysScreen", "remove")
    await live.client.create_tenant("project", "Parity/rm/gone", parents=True)
    await to_keys(app, pilot, live)
    await select_level(pilot, "Parity/rm/gone")
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: "Parity/rm/gone" not in tree_levels(app))
    assert "Parity/rm/gone" not in await projects(live, item)


async def do_new_key(app, pilot, live):
    item = ("KeysScreen", "new_key")
    await to_keys(app, pilot, live)
    await select_level(pilot, SEARCH)
    await press(pilot, *item, "KeyDialog")
    app.screen.query_one("#key-name", Input).value = "parity-bot"
    await pilot.click("#form-ok")
    await until(pilot, lambda: screen_is(app, "SecretShown"))
    secret = app.screen.secret
    await pilot.press("enter")
    await until(pilot, lambda: screen_is(app, "KeysScreen"))
    made = await key_named(live, "parity-bot")
    assert made.project == SEARCH and secret.startswith(made.prefix)
    assert made.key_id in await keys_agree(app, pilot, live, item)


async def _key_selected(app, pilot, live, name: str, **limits) -> KeyView:
    made = await live.client.create_key(SEARCH, name=name, **limits)
    await to_keys(app, pilot, live)
    await cursor_to(pilot, "#keys", made.key_id)
    return made


async def do_revoke(app, pilot, live):
    item = ("KeysScreen", "revoke")
    made = await _key_selected(app, pilot, live, "parity-revoke")
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    rows = await keys_agree(app, pilot, live, item)
    assert rows[made.key_id][-1] == "revoked"


async def do_rotate(app, pilot, live):
    item = ("KeysScreen", "rotate")
    made = await _key_selected(app, pilot, live, "parity-rotate")
    await press(pilot, *item, "RotateDialog")
    await pilot.press("enter")
    await until(pilot, lambda: screen_is(app, "SecretShown"))
    new, secret = app.screen.key, app.screen.secret
    await pilot.press("escape")
    await until(pilot, lambda: screen_is(app, "KeysScreen"))
    rows = await keys_agree(app, pilot, live, item)
    assert rows[made.key_id][1] == "rotated" and new.key_id in rows
    keys = {k.key_id: k for k in ListKeysReply.from_dict(await live.shown_by(item)).keys}
    assert keys[new.key_id].rotated_from == made.key_id
    assert secret.startswith(keys[new.key_id].prefix)


async def do_limits(app, pilot, live):
    item = ("KeysScreen", "limits")
    made = await _key_selected(app, pilot, live, "parity-limits", rpm=60)
    await press(pilot, *item, "LimitsDialog")
    app.screen.query_one("#limits-rpm", Input).value = "61"
    await pilot.click("#form-ok")
    await until(pilot, lambda: screen_is(app, "KeysScreen"))
    rows = await keys_agree(app, pilot, live, item)
    keys = {k.key_id: k for k in ListKeysReply.from_dict(await live.shown_by(item)).keys}
    assert keys[made.key_id].limits.rpm == 61 and "61" in rows[made.key_id][6]


async def do_retention(app, pilot, live):
    item = ("KeysScreen", "retention")
    await live.client.create_tenant("project", "Parity/kept/answers", parents=True)
    await to_keys(app, pilot, live)
    await select_level(pilot, "Parity/kept/answers")
    await press(pilot, *item, "RetentionDialog")
    app.screen.query_one("#retention-keep", Input).value = "24h"
    await pilot.click("#form-ok")
    await until(pilot, lambda: screen_is(app, "KeysScreen"))
    level = app.screen.query_one("#level", Static)
    await until(pilot, lambda: "responses kept 1d" in str(level.render()))
    tenants = ListTenantsReply.from_dict(await live.shown_by(item)).tenants
    kept = {t.path: t.retain_responses_s for t in tenants}
    assert kept["Parity/kept/answers"] == 86400


async def nodes_json(live: Live, item: Item) -> dict[str, NodeView]:
    return {n.node_id: n for n in ListNodesReply.from_dict(await live.shown_by(item)).nodes}


async def nodes_agree(app, pilot, live, item: Item) -> dict[str, list[str]]:
    async def said():
        return {k: cells(node_cells(n)) for k, n in (await nodes_json(live, item)).items()}

    return await agree(pilot, lambda: table_rows(app, "#nodes"), said)


async def do_cordon(app, pilot, live):
    item = ("NodesScreen", "cordon")
    await live.client.uncordon_node("spare-node")
    await to_nodes(app, pilot, live)
    await cursor_to(pilot, "#nodes", "spare-node")
    await pilot.press(key_of(*item))
    await until(pilot, lambda: "cordoned" in table_rows(app, "#nodes")["spare-node"][1])
    assert (await nodes_json(live, item))["spare-node"].cordoned
    await nodes_agree(app, pilot, live, item)
    await live.client.uncordon_node("spare-node")


async def do_uncordon(app, pilot, live):
    item = ("NodesScreen", "uncordon")
    await live.client.cordon_node("spare-node")
    await to_nodes(app, pilot, live)
    await cursor_to(pilot, "#nodes", "spare-node")
    await until(pilot, lambda: "cordoned" in table_rows(app, "#nodes")["spare-node"][1])
    await pilot.press(key_of(*item))
    await until(pilot, lambda: "cordoned" not in table_rows(app, "#nodes")["spare-node"][1])
    assert not (await nodes_json(live, item))["spare-node"].cordoned
    await nodes_agree(app, pilot, live, item)


async def do_drain(app, pilot, live):
    item = ("NodesScreen", "drain")
    await to_nodes(app, pilot, live)
    await cursor_to(pilot, "#nodes", "spare-node")
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: "draining" in table_rows(app, "#nodes")["spare-node"][1])
    view = (await nodes_json(live, item))["spare-node"]
    assert view.draining and view.cordoned
    await nodes_agree(app, pilot, live, item)
    await live.client.uncordon_node("spare-node")  # what the drain says undoes it


async def do_remove_node(app, pilot, live):
    item = ("NodesScreen", "remove")
    # Its agent stopped: gatewayd lets a node go once nothing is connected to it.
    live.agents["retired-node"].set()

    async def away():
        return (await nodes_json(live, item))["retired-node"].state != "ready"

    await wait_for(away, attempts=400)
    await to_nodes(app, pilot, live)
    await cursor_to(pilot, "#nodes", "retired-node")
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: "retired-node" not in table_rows(app, "#nodes"))
    assert "retired-node" not in await nodes_json(live, item)
    await nodes_agree(app, pilot, live, item)


async def do_label(app, pilot, live):
    item = ("NodesScreen", "label")

    async def label_with(set_: str, remove: str) -> None:
        await to_nodes(app, pilot, live)
        await cursor_to(pilot, "#nodes", "spare-node")
        await press(pilot, *item, "LabelDialog")
        app.screen.query_one("#label-set", Input).value = set_
        app.screen.query_one("#label-rm", Input).value = remove
        await pilot.press("enter")
        await until(pilot, lambda: screen_is(app, "NodesScreen"))

    await label_with("zone=a rack=r7", "")
    await until(pilot, lambda: table_rows(app, "#nodes")["spare-node"][8] == "rack=r7, zone=a")
    assert (await nodes_json(live, item))["spare-node"].labels == {"zone": "a", "rack": "r7"}
    await nodes_agree(app, pilot, live, item)

    await label_with("", "rack")
    await until(pilot, lambda: table_rows(app, "#nodes")["spare-node"][8] == "zone=a")
    assert (await nodes_json(live, item))["spare-node"].labels == {"zone": "a"}
    await nodes_agree(app, pilot, live, item)
    await live.client.label_node("spare-node", remove=["zone"])


# node add builds its wheel (once, seconds), then the agent registers (a second or two):
# 60 s covers a loaded machine.
ONBOARD_TRIES = 1200


def _node_options(node: FakeNode) -> dict[str, str]:
    return {
        "port": str(node.port),
        "user": "root",
        "identity": str(node.client_key_file),
        "known-hosts": str(node.known_hosts_file),
        "install-root": str(node.root / "installed"),
    }


async def do_add_node(app, pilot, live):
    item = ("AddNodeDialog", "add")
    where = live.cluster.paths.home.parent / "added"
    # One fake machine each for the dialog and the command: both onboard a fresh one.
    # Each starts a real agent where the node would, killed when the node stops.
    nodes = [await start_fake_node(where / n, Scenario(real_agent=True)) for n in ("tui", "cli")]
    try:
        await to_add_node(app, pilot, live)
        dialog = app.screen
        fields = {f"#add-{k}": v for k, v in _node_options(nodes[0]).items()}
        fields["#add-root"] = fields.pop("#add-install-root")
        fields |= {
            "#add-host": "127.0.0.1",
            "#add-node-id": "added-tui",
            "#add-planes": live.cluster.agent_address,
        }
        for selector, value in fields.items():
            dialog.query_one(selector, Input).value = value
        await pilot.pause()
        await pilot.click("#add-button")
        ended = lambda: bool(dialog.events) and dialog.events[-1].step == "result"
        await until(pilot, ended, tries=ONBOARD_TRIES)
        shown = static_text(app, "#add-log") + static_text(app, "#add-result")
        assert dialog.events[-1].status == "ok", shown

        # The command, on the other machine: the same steps, each with the same status.
        options = [word for k, v in _node_options(nodes[1]).items() for word in (f"--{k}", v)]
        options += ["--node-id", "added-cli", "--control-plane", live.cluster.agent_address]
        said = await live.steps(PARITY[item].commands[0], *options, host="127.0.0.1")
        assert said[-1]["status"] == "ok", said[-2:]
        assert [(e.step, e.status, e.item) for e in dialog.events] == [
            (e["step"], e["status"], e.get("item", "")) for e in said
        ]
        # Each in the command's words (llmgw.onboard.words), the fix under a warning.
        assert static_text(app, "#add-log") == plain(steps_table(dialog.events[:-1]))
        assert "added-tui joined the cluster" in static_text(app, "#add-result")

        # Closed, the Nodes screen shows the new row by itself, as `ctl nodes` does.
        await pilot.press("escape")
        await until(pilot, lambda: "added-tui" in table_rows(app, "#nodes"))
        views = await nodes_json(live, item)
        assert views["added-tui"].state == views["added-cli"].state == "ready"
        await nodes_agree(app, pilot, live, item)
    finally:
        for node in nodes:
            await stop_fake_node(node)


async def _restarted(app, pilot, live, item: Item, replica_id: str) -> None:
    """The replica stops as the command's restart stops it, and both the screen and
    `ctl replicas --json` say so."""

    async def stopping():
        reply = ListReplicasReply.from_dict(await live.shown_by(item))
        r = next(r for r in reply.replicas if r.replica_id == replica_id)
        return r.state in ("draining", "stopped") and "restarted by the operator" in r.reason

    await wait_for(stopping, attempts=200)


async def do_restart(app, pilot, live):
    item = ("ReplicasScreen", "restart")
    await to_replicas(app, pilot, live)
    await until(pilot, lambda: bool(_replica_of(app, RESTARTED[0])), tries=READY_ATTEMPTS)
    replica_id = _replica_of(app, RESTARTED[0])
    await cursor_to(pilot, "#replicas", replica_id)
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: screen_is(app, "ReplicasScreen"))
    await _restarted(app, pilot, live, item, replica_id)

    async def said():
        reply = ListReplicasReply.from_dict(await live.shown_by(item))
        return {r.replica_id: cells(replica_cells(r)) for r in reply.replicas}

    await agree(pilot, lambda: table_rows(app, "#replicas"), said)


async def do_restart_in_details(app, pilot, live):
    item = ("ReplicaDetails", "restart")
    await to_replicas(app, pilot, live)
    await until(pilot, lambda: bool(_replica_of(app, RESTARTED[1])), tries=READY_ATTEMPTS)
    replica_id = _replica_of(app, RESTARTED[1])
    await cursor_to(pilot, "#replicas", replica_id)
    await press(pilot, "ReplicasScreen", "history", "ReplicaDetails")
    await press(pilot, *item, "Confirm")
    await pilot.press("y")
    await until(pilot, lambda: screen_is(app, "ReplicaDetails"))
    await _restarted(app, pilot, live, item, replica_id)
    # The open history follows it: its facts are the replica's row of the command.
    await check_replica_details(app, pilot, live)


async def do_logs(app, pilot, live):
    await to_replica_details(app, pilot, live)
    await pilot.press(key_of("ReplicaDetails", "logs"))
    await check_log_tail(app, pilot, live)


async def do_usage_step(app, pilot, live, action: str):
    item = ("UsageScreen", action)
    await to_usage(app, pilot, live)
    before = app.screen.shown
    await pilot.press(key_of(*item))
    await until(pilot, lambda: app.screen.shown not in (None, before))
    await check_usage(app, pilot, live, item=item)


ACTIONS: dict[Item, Step] = {
    ("NodesScreen", "cordon"): do_cordon,
    ("NodesScreen", "uncordon"): do_uncordon,
    ("NodesScreen", "drain"): do_drain,
    ("NodesScreen", "remove"): do_remove_node,
    ("NodesScreen", "label"): do_label,
    ("AddNodeDialog", "add"): do_add_node,
    ("ReplicasScreen", "restart"): do_restart,
    ("ReplicaDetails", "restart"): do_restart_in_details,
    ("ModelsScreen", "scale"): do_scale,
    ("ModelsScreen", "remove"): do_remove,
    ("ServeDialog", "plan"): do_plan,
    ("ServeDialog", "serve"): do_serve,
    ("KeysScreen", "new_level"): do_new_level,
    ("KeysScreen", "rename"): do_rename,
    ("KeysScreen", "remove"): do_remove_level,
    ("KeysScreen", "new_key"): do_new_key,
    ("KeysScreen", "revoke"): do_revoke,
    ("KeysScreen", "rotate"): do_rotate,
    ("KeysScreen", "limits"): do_limits,
    ("KeysScreen", "retention"): do_retention,
    ("ReplicaDetails", "logs"): do_logs,
    ("UsageScreen", "next_range"): lambda app, pilot, live: do_usage_step(
        app, pilot, live, "next_range"
    ),
    ("UsageScreen", "next_grouping"): lambda app, pilot, live: do_usage_step(
        app, pilot, live, "next_grouping"
    ),
}
