"""Screens ≡ commands: every screen and action of the cluster console against its `llmgw ctl`.

``tui.parity`` declares, for each screen and action, the ``llmgw ctl``
command it mirrors. Here the declarations are held to it:

- every screen and action the console offers is declared (a new one without
  a declaration fails here, by name), and no declaration names one gone;
- every declared command is a real ``llmgw ctl`` command taking ``--json``
  (or one of the few outside ``ctl`` a screen runs itself: ``node add``);
- against one live cluster (gatewayd, four agents on recorded hardware, sim
  models, a project with keys, recorded usage), each screen is opened
  through the pilot and its rows are compared with the declared command's
  ``--json`` reply, drawn with the same cell helpers; each action is
  performed through the pilot and its result read back with the command
  that shows it (cordon → ``ctl nodes --json`` says cordoned). Add node
  onboards an in-process SSH node that starts a real agent, as ``llmgw node
  add --json`` onboards another: both report the same steps, and
  ``ctl nodes --json`` then shows the nodes ready.

The commands run through Typer's CliRunner with LLMGW_HOME set to the
cluster's, in a thread: the cluster answers on this test's event loop. How
each screen is opened and compared is ``tests/tui/parity/kit.py``; how each
action is performed and read back, ``tests/tui/parity/actions.py``. A
screen or action declared with a command but with neither fails here too.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
import typer

from llmgw.cli.main import app as llmgw_cli
from tests.cluster_fixture import running_cluster, wait_for
from tests.tui.parity import batches as parity_batches
from tests.tui.parity import mcp_gateway as parity_mcp
from tests.tui.parity import mirror as parity_mirror
from tests.tui.parity import models as parity_models
from tests.tui.parity import settings as parity_settings
from tests.tui.parity import weights as parity_weights
from tests.tui.parity.actions import ACTIONS as KIT_ACTIONS
from tests.tui.parity.kit import (
    READY_ATTEMPTS,
    RESTARTED,
    SEARCH,
    SIZE,
    Live,
    first_mode,
    point_the_cli_at,
    screen_is,
)
from tests.tui.parity.kit import SCREENS as KIT_SCREENS
from tests.tui.test_models_screen import sim_model
from tests.tui.test_usage_screen import record
from tests.tui.test_usage_screen import row as usage_row
from tui import parity
from tui.app import LlmgwApp
from tui.parity import PARITY, Item, Mirror

# How each screen is opened and compared, and each action performed and read back.
SCREENS = {
    **KIT_SCREENS,
    **parity_batches.SCREENS,
    **parity_mirror.SCREENS,
    **parity_models.SCREENS,
    **parity_mcp.SCREENS,
    **parity_settings.SCREENS,
    **parity_weights.SCREENS,
}
ACTIONS = {
    **KIT_ACTIONS,
    **parity_batches.ACTIONS,
    **parity_mirror.ACTIONS,
    **parity_models.ACTIONS,
    **parity_mcp.ACTIONS,
    **parity_settings.ACTIONS,
    **parity_weights.ACTIONS,
}

# -- the declarations themselves ----------------------------------------------------


def test_every_screen_and_action_of_the_console_declares_the_command_it_mirrors():
    missing = [parity.describe_item(i) for i in parity.undeclared()]
    assert not missing, (
        "declare what these mirror in tui/parity.py PARITY — the `llmgw ctl` command that "
        "shows the same data or makes the same change, or ui_only('why') for one that "
        f"only moves around the console: {missing}"
    )


def test_no_declaration_names_a_screen_or_action_the_console_no_longer_has():
    gone = [parity.describe_item(i) for i in parity.stale()]
    assert not gone, f"tui/parity.py declares what the console no longer offers: {gone}"


def test_a_declaration_says_what_it_mirrors_or_why_nothing():
    for item, mirror in PARITY.items():
        said = [bool(mirror.commands), bool(mirror.opens), bool(mirror.ui_only)]
        assert said.count(True) == 1, f"{parity.describe_item(item)}: {mirror}"
        if mirror.shown_by:
            assert mirror.commands, f"{parity.describe_item(item)}: shown_by without commands"
        if mirror.opens:
            assert (mirror.opens, None) in PARITY, f"{item} opens an undeclared screen"


def _command(argv: tuple[str, ...]) -> Any:
    """The click command ``llmgw ARGV`` runs (placeholders and options skipped).

    Typer carries its own copy of click: groups and options are told apart by
    what they have, not by click's classes.
    """
    cmd = typer.main.get_command(llmgw_cli)
    ctx = cmd.make_context("llmgw", [], resilient_parsing=True)
    for word in argv:
        if not hasattr(cmd, "get_command") or word.startswith(("-", "{")):
            break
        sub = cmd.get_command(ctx, word)
        assert sub is not None, f"`llmgw {' '.join(argv)}`: no command {word!r}"
        cmd = sub
    # A group runs only when it has a command of its own (``ctl usage`` does).
    runs = not hasattr(cmd, "get_command") or cmd.invoke_without_command
    assert runs, f"`llmgw {' '.join(argv)}` names a group, not a command"
    return cmd


def _declared_commands() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for mirror in PARITY.values():
        out += mirror.commands
        if mirror.shown_by:
            out.append(mirror.shown_by)
    return sorted(set(out))


@pytest.mark.parametrize("argv", _declared_commands(), ids=" ".join)
def test_each_declared_command_is_a_real_ctl_command_with_json(argv):
    # `ctl` commands, and the few outside it a screen runs itself (node add).
    assert argv[0] == "ctl" or argv[:2] in parity.OUTSIDE_CTL, f"`llmgw {' '.join(argv)}`"
    cmd = _command(argv)
    # A flag pair (--enable/--disable) names its second half in secondary_opts.
    options = {
        o for p in cmd.params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)
    }
    assert "--json" in options, f"`llmgw {' '.join(argv)}` has no --json"
    for word in argv:
        if word.startswith("-"):
            assert word in options, f"`llmgw {' '.join(argv)}`: no option {word}"


# -- one live cluster for the whole module ----------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live(tmp_path_factory):
    """gatewayd with a CPU node and an 8×H100 node (recorded); sim-chat and the models to
    restart ready; parity-scale and parity-rm with no replicas; Acme/ml/search with two
    keys; usage of the last hours. Then spare-node (to cordon and drain) and retired-node
    (cordoned, to remove), joined once the models run elsewhere; two batches through
    the Batch API (one completed, one waiting on a model placed nowhere); a real mirror
    (with a peer) holding small repositories pulled from a fake hub through gatewayd;
    company MCP servers written with the SDK (hr, wiki) with hr added and granted; in
    cpu-node's weights cache, what earlier replicas would have left there."""
    tmp = tmp_path_factory.mktemp("parity")

    def with_mirror(cfg) -> None:
        cfg.mirror = mirrors.settings()

    async with (
        parity_mirror.Mirrors(tmp / "mirrors") as mirrors,
        parity_mcp.McpServers() as mcps,
        running_cluster(tmp, configure=with_mirror) as cluster,
    ):
        point_the_cli_at(cluster)
        agents: dict[str, asyncio.Event] = {}

        async def start(node_id: str, fixture: str) -> None:
            _, stop, _ = await cluster.start_agent(node_id, fixture=fixture)
            agents[node_id] = stop

        # What earlier replicas left in cpu-node's weights cache (the Weights dialog's).
        parity_weights.plant(cluster.paths.agent_data_dir / parity_weights.NODE)
        await start("cpu-node", "cpu_only_16c")
        await start("gpu-box", "h100_80g_x8")
        async with cluster.admin() as admin:

            async def ready(n: int) -> bool:
                return [x.state for x in (await admin.list_nodes()).nodes] == ["ready"] * n

            await wait_for(lambda: ready(2), attempts=200)
            for name in ("sim-chat", *RESTARTED):
                await admin.put_model(sim_model(name), create_only=True)
            await admin.put_model(sim_model("parity-scale", replicas=0), create_only=True)
            await admin.put_model(sim_model("parity-rm", replicas=0), create_only=True)
            await admin.put_model(
                sim_model(parity_models.CORES_MODEL, replicas=0), create_only=True
            )
            await admin.create_tenant("project", SEARCH, parents=True)
            await admin.create_key(SEARCH, name="web", rpm=60, tpm=1000)
            await admin.create_key(SEARCH, name="batch", models=["sim-chat"])

            async def models_ready():
                models = (await admin.list_models()).models
                return all(m.replicas_ready == m.replicas_desired for m in models)

            await wait_for(models_ready, attempts=READY_ATTEMPTS)
            await start("spare-node", "cpu_only_16c")
            await start("retired-node", "cpu_only_16c")
            await wait_for(lambda: ready(4), attempts=200)
            await admin.cordon_node("retired-node")
            # Batches through the Batch API: one completed, one waiting (to cancel).
            batches = await parity_batches.make_batches(cluster, admin)
            await mirrors.fill(admin)
            await mcps.fill(admin)
        await record(
            cluster,
            usage_row(SEARCH, "sim-chat", timedelta(minutes=10)),
            usage_row(SEARCH, "sim-chat", timedelta(minutes=20), key="key_b"),
            usage_row("Acme/ml/chat", "embed", timedelta(hours=3), status=500),
            usage_row(SEARCH, "sim-chat", timedelta(days=3)),
        )
        async with cluster.admin() as client:
            yield Live(cluster, client, agents, batches, mcps)


def _live_items() -> list[Item]:
    return sorted((i for i, m in PARITY.items() if m.checked_live), key=parity.describe_item)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("item", _live_items(), ids=parity.describe_item)
async def test_the_console_shows_what_its_declared_command_says(live, item):
    mirror: Mirror = PARITY[item]
    cls, action = item
    # The console runs on the control plane, with its files: Add node issues certificates.
    app = LlmgwApp(live.client, first_screen=first_mode(item), paths=live.cluster.paths)
    async with app.run_test(size=SIZE) as pilot:
        if action is None:
            if cls not in SCREENS:
                pytest.fail(f"{cls} declares {mirror.commands}: add how to open and check it")
            open_it, check = SCREENS[cls]
            await open_it(app, pilot, live)
            assert check is not None, f"{cls} declares commands but nothing compares them"
            await check(app, pilot, live)
        elif mirror.opens:
            # The target's own way there goes through this very action (see
            # test_every_opens_declaration_goes_through_its_own_key), and the target's
            # test compares what it shows: here, the action opens it.
            open_it, _ = SCREENS.get(mirror.opens, (None, None))
            if open_it is None:
                pytest.fail(f"{parity.describe_item(item)} opens {mirror.opens}: add it to SCREENS")
            before = type(app.screen).__name__
            await open_it(app, pilot, live)
            assert screen_is(app, mirror.opens) and before != mirror.opens
        else:
            if item not in ACTIONS:
                pytest.fail(
                    f"{parity.describe_item(item)} declares {mirror.commands}: "
                    "add how to perform it and read it back to ACTIONS"
                )
            await ACTIONS[item](app, pilot, live)
        assert app.is_running


def test_every_opens_declaration_goes_through_its_own_key():
    # The SCREENS routes open a screen through one action; each action declared to open
    # a screen must be that route's (a second way there would go unchecked).
    routes = {
        "OverviewScreen": ("LlmgwApp", "switch_mode('overview')"),
        "NodeDetails": ("NodesScreen", "details"),
        "NodeWeights": ("NodesScreen", "weights"),
        "NodesScreen": ("LlmgwApp", "switch_mode('nodes')"),
        "ModelsScreen": ("LlmgwApp", "switch_mode('models')"),
        "ReplicasScreen": ("LlmgwApp", "switch_mode('replicas')"),
        "KeysScreen": ("LlmgwApp", "switch_mode('keys')"),
        "UsageScreen": ("LlmgwApp", "switch_mode('usage')"),
        "BatchesScreen": ("LlmgwApp", "switch_mode('batches')"),
        "MirrorScreen": ("LlmgwApp", "switch_mode('mirror')"),
        "McpScreen": ("LlmgwApp", "switch_mode('mcp')"),
        "SettingsScreen": ("LlmgwApp", "switch_mode('settings')"),
        "ServeDialog": ("ModelsScreen", "serve"),
        "AddNodeDialog": ("NodesScreen", "add_node"),
        "ExplainPlacement": ("ModelsScreen", "explain"),
        "ReplicaDetails": ("ReplicasScreen", "history"),
    }
    for item, mirror in PARITY.items():
        if mirror.opens:
            assert routes.get(mirror.opens) == item, f"{item} opens {mirror.opens}: route it"
