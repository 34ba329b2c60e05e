"""Every console with fixed data: the scenes snapshots and docs/console.md are drawn from.

The cluster console runs over ``FixedAdmin`` (``tests/tui/kit/fixed_cluster.py``),
the node console over ``FixedProbe`` (one look at a node, always the same),
setup on a fixed machine; so a screen draws the same on every machine.

``SCENES`` names each screen a person can reach and how to get there
(``open`` drives the pilot and waits until the screen is filled in).
``tests/tui/test_snapshots.py`` snapshots them; ``scripts/console_captures.py``
writes them into docs/console.md as text.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Select, Static

from llmgw.agent_status import (
    AgentStatus,
    AgentWarning,
    ControlPlaneState,
    DiskReport,
    EngineReport,
    ShardReport,
)
from llmgw.onboard import StepEvent
from llmgw.onboard.flow import NEXT_STEP
from llmgw.paths import Paths
from llmgw.setup.plan import Machine, default_plan
from tests.tui.kit.fixed_cluster import GIB, LOG_TAIL, NODES, FixedAdmin
from tui.app import LlmgwApp
from tui.node import NodeConsole
from tui.node.gpus import GpuReading, GpuReport
from tui.node.probe import NodeFacts, PlaneAnswer
from tui.setup.app import SetupConsole

# 2025-03-02 14:03:07 UTC: the node console's clock (run with TZ=UTC).
NODE_CLOCK_UNIX = 1740924187.0


# -- the node console ------------------------------------------------------------------

AGENT_YAML = """\
# Written by llmgw node add on 2025-03-02.
node_id: gpu-01
control_planes: [cp-1.lab:7701, cp-2.lab:7701]
data_dir: /var/lib/llmgw-agent
log_level: info
"""


class FixedProbe:
    """One look at gpu-01, always the same (what ``NodeProbe.look`` would find)."""

    status_socket = Path("/run/llmgw/agent.sock")

    async def look(self) -> NodeFacts:
        status = AgentStatus(
            node_id="gpu-01",
            hostname="gpu-01.lab",
            version="0.1.0",
            pid=1187,
            state="connected",
            state_since_unix=NODE_CLOCK_UNIX - 3600,
            connected_to="cp-1.lab:7701",
            probe="nvml",
            control_planes=[
                ControlPlaneState(address="cp-1.lab:7701", connected=True),
                ControlPlaneState(address="cp-2.lab:7701", source="cluster"),
            ],
            engines=[
                EngineReport(
                    engine="llama.cpp", version="b4604", variant="cuda", state="installed"
                ),
                EngineReport(engine="vllm", version="0.8.4", state="installed"),
                EngineReport(
                    engine="sglang", state="skipped", message="not asked for by any model"
                ),
            ],
            shards=[
                ShardReport(
                    shard_id="s1",
                    replica_id="llama-3.1-8b-7c1f",
                    model="llama-3.1-8b",
                    state="ready",
                    port=41201,
                    pid=20311,
                    gpu_indexes=[0],
                ),
                ShardReport(
                    shard_id="s2",
                    replica_id="llama-3.1-8b-a93e",
                    model="llama-3.1-8b",
                    state="ready",
                    port=41202,
                    pid=20340,
                    gpu_indexes=[1],
                ),
            ],
            disks=[
                DiskReport(
                    what="weights",
                    path="/var/lib/llmgw-agent/weights",
                    free_bytes=1200 * GIB,
                    total_bytes=1800 * GIB,
                ),
                DiskReport(
                    what="engines",
                    path="/opt/llmgw/engines",
                    free_bytes=80 * GIB,
                    total_bytes=100 * GIB,
                ),
            ],
            warnings=[
                AgentWarning(
                    at_unix=NODE_CLOCK_UNIX - 1200,
                    text="cp-2.lab:7701: connection refused (retrying)",
                )
            ],
        )
        gpus = [
            GpuReading(
                index=i,
                name="NVIDIA H100 80GB HBM3",
                memory_used_bytes=(9 * GIB if i < 2 else 0),
                memory_total_bytes=80 * GIB,
                utilization_percent=(37 if i < 2 else 0),
                temperature_c=(52 if i < 2 else 33),
            )
            for i in range(8)
        ]
        return NodeFacts(
            read_unix=NODE_CLOCK_UNIX,
            status=status,
            gpus=GpuReport(gpus=gpus),
            plane_addresses=["cp-1.lab:7701", "cp-2.lab:7701"],
            planes={
                "cp-1.lab:7701": PlaneAnswer("cp-1.lab:7701", True, "answers in 1 ms"),
                "cp-2.lab:7701": PlaneAnswer(
                    "cp-2.lab:7701", False, "no answer: connection refused"
                ),
            },
        )


def node_console(workdir: Path) -> NodeConsole:
    """The node console of gpu-01; agent.yaml is ``etc/agent.yaml`` under ``workdir``, which
    must be the working directory (a relative path reads the same on every machine)."""
    (workdir / "etc").mkdir(parents=True, exist_ok=True)
    (workdir / "etc" / "agent.yaml").write_text(AGENT_YAML)
    home = Path("node-home")
    paths = Paths(
        config_dir=Path("etc"),
        server_data_dir=home / "server",
        agent_data_dir=home / "agent",
        engines_dir=home / "engines",
        run_dir=home / "run",
    )
    app = NodeConsole(paths)
    app.probe = FixedProbe()  # type: ignore[assignment]
    app.sub_title = "gpu-01.lab"
    return app


# -- setup -----------------------------------------------------------------------------

MACHINE = Machine(
    hostname="cp-1",
    memory_total_bytes=64 * GIB,
    memory_available_bytes=48 * GIB,
    starter_installed=True,
    groups=("llmgw", "ops"),
)


def setup_console() -> SetupConsole:
    """Setup on a fresh 64 GiB machine, the plan ``llmgw up`` would make, into /srv/llmgw."""
    return SetupConsole(
        Paths.under(Path("/srv/llmgw")),
        machine=MACHINE,
        plan=default_plan(MACHINE),
        start=False,
    )


# -- the scenes ------------------------------------------------------------------------


async def until(pilot: Pilot, cond: Callable[[], bool], *, tries: int = 200) -> None:
    for _ in range(tries):
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"the scene did not settle: {cond}")


def _rows(pilot: Pilot, selector: str) -> int:
    tables = list(pilot.app.screen.query(selector).results(DataTable))
    return tables[0].row_count if tables else 0


def _on(pilot: Pilot, name: str) -> bool:
    return type(pilot.app.screen).__name__ == name


async def _mode(pilot: Pilot, key: str, screen: str, table: str) -> None:
    await pilot.press(key)
    await until(pilot, lambda: _on(pilot, screen) and _rows(pilot, table) > 0)


async def open_overview(pilot: Pilot) -> None:
    await until(pilot, lambda: _on(pilot, "OverviewScreen"))
    body = pilot.app.screen.query_one("#gpu-body", Static)
    await until(pilot, lambda: "gpu-01" in plain(body.content))


async def open_nodes(pilot: Pilot) -> None:
    await pilot.press("n")
    await until(pilot, lambda: _on(pilot, "NodesScreen") and _rows(pilot, "#nodes") == len(NODES))
    # gpu-01 highlighted: the pane shows its cards and the replicas on them.
    await pilot.press("down")
    pane = pilot.app.screen.query_one("#node-pane-body", Static)
    await until(pilot, lambda: "GPU 7" in plain(pane.content))


async def open_node_details(pilot: Pilot) -> None:
    await open_nodes(pilot)
    await pilot.press("enter")
    await until(pilot, lambda: _on(pilot, "NodeDetails"))
    await pilot.pause()


async def open_node_weights(pilot: Pilot) -> None:
    await open_nodes(pilot)
    await pilot.press("f")
    await until(pilot, lambda: _on(pilot, "NodeWeights") and _rows(pilot, "#weights") > 0)
    await pilot.pause()


async def open_models(pilot: Pilot) -> None:
    await _mode(pilot, "m", "ModelsScreen", "#models")


async def open_serve(pilot: Pilot) -> None:
    await open_models(pilot)
    await pilot.press("a")
    await until(pilot, lambda: _on(pilot, "ServeDialog"))
    dialog = pilot.app.screen
    dialog.query_one("#serve-source", Input).value = PLAN_SOURCE
    dialog.query_one("#serve-engine", Select).value = "llama.cpp"
    await pilot.click("#serve-plan-button")
    # The focus stays on the Plan button: a focused field's cursor blinks, and a
    # snapshot would catch it on or off.
    await until(pilot, lambda: _rows(pilot, "#serve-layouts") > 0)
    await pilot.pause()


PLAN_SOURCE = "hf:meta-llama/Llama-3.1-8B-Instruct-GGUF:q4_k_m.gguf"


def _step(step: str, status: str, detail: str, elapsed_s: float, **more) -> StepEvent:
    return StepEvent(step=step, status=status, detail=detail, elapsed_s=elapsed_s, **more)  # type: ignore[arg-type]


# node add of gpu-04, as the command reports it: a GPU machine with systemd, one warning.
ADD_NODE_EVENTS = [
    _step("connect", "running", "connecting to root@gpu-04.lab", 0.0),
    _step("connect", "ok", "logged in as root", 0.4),
    *(
        _step("doctor", status, detail, 1.2, item=item, fix=fix)
        for item, status, detail, fix in (
            ("os", "ok", "ubuntu 22.04 (Debian family)", ""),
            ("package manager", "ok", "apt-get", ""),
            ("cpu", "ok", "vector extensions: sse4_2, avx, avx2, fma, f16c", ""),
            ("nvidia driver", "ok", "550.54.15 (proprietary kernel module)", ""),
            ("gpus", "ok", "4 GPU(s): 4× NVIDIA L40S", ""),
            ("disk", "ok", "812.4 GiB free for /var/lib/llmgw-agent", ""),
            ("glibc", "ok", "glibc 2.35", ""),
            ("libstdc++", "ok", "GLIBCXX_3.4.30", ""),
            ("python", "ok", "Python 3.11.9", ""),
            (
                "clock",
                "warn",
                (
                    "2.4 s ahead of the control plane's clock: usage times and heartbeat "
                    "deadlines will be off"
                ),
                "turn on time sync on the node (timedatectl set-ntp true)",
            ),
            ("systemd", "ok", "the agent runs as llmgw-agent.service", ""),
            ("control plane", "ok", "cp-1.lab:7701 reachable", ""),
        )
    ),
    _step("doctor", "ok", "12 checks, 1 warning(s)", 1.3),
    _step("install", "running", "copying llmgw-0.1.0-py3-none-any.whl (0.6 MB)", 0.1),
    _step("install", "running", "creating /opt/llmgw/venv", 0.9),
    _step("install", "running", "installing llmgw and its dependencies from PyPI", 4.2),
    _step("install", "ok", "llmgw 0.1.0 installed in /opt/llmgw/venv", 48.7),
    _step("packages", "kept", "libgomp1 is installed already", 0.3),
    _step("user", "running", "creating the system user llmgw-engine for engines", 0.0),
    _step(
        "user",
        "ok",
        "created llmgw-engine, a system user with no login, home /var/lib/llmgw-agent/engine-home",
        0.1,
    ),
    _step(
        "join",
        "running",
        "wrote ca.crt, node.crt, node.key, agent.yaml (certificate 3F:8A:11:C0:5E:92:7B:D4…)",
        0.6,
    ),
    _step("join", "ok", "llmgw-agent.service enabled and (re)started", 1.9),
    _step("register", "running", "waiting for gpu-04 to register", 0.0),
    _step(
        "register",
        "ok",
        "gpu-04 is ready: ubuntu 22.04, x86_64, 48 CPUs, 384 GiB memory, GPUs: 4× NVIDIA L40S",
        3.1,
    ),
    _step(
        "result",
        "ok",
        "gpu-04 joined the cluster",
        61.0,
        fix=NEXT_STEP,
        result={"ok": True, "exit_code": 0, "node_id": "gpu-04", "warnings": [{"check": "clock"}]},
    ),
]


async def open_add_node(pilot: Pilot) -> None:
    await open_nodes(pilot)
    await pilot.press("a")
    await until(pilot, lambda: _on(pilot, "AddNodeDialog"))
    # The run's events, as the worker would post them (no machine is reached).
    dialog = pilot.app.screen
    dialog.show_started("root@gpu-04.lab")
    for event in ADD_NODE_EVENTS:
        dialog.show_event(event)
    await pilot.pause()


async def open_explain(pilot: Pilot) -> None:
    await open_models(pilot)
    await pilot.press("e")
    await until(pilot, lambda: _on(pilot, "ExplainPlacement"))
    await until(pilot, lambda: _rows(pilot, "#explain-reasons") > 0)


async def open_replicas(pilot: Pilot) -> None:
    await _mode(pilot, "p", "ReplicasScreen", "#replicas")


async def open_replica_details(pilot: Pilot) -> None:
    await open_replicas(pilot)
    await pilot.press("enter")
    await until(pilot, lambda: _on(pilot, "ReplicaDetails"))
    logs = pilot.app.screen.query_one("#replica-logs", Static)
    await until(pilot, lambda: LOG_TAIL[0] in str(logs.content))


async def open_keys(pilot: Pilot) -> None:
    await _mode(pilot, "k", "KeysScreen", "#keys")


async def open_usage(pilot: Pilot) -> None:
    await _mode(pilot, "u", "UsageScreen", "#usage")


async def open_batches(pilot: Pilot) -> None:
    await _mode(pilot, "b", "BatchesScreen", "#batches")
    pane = pilot.app.screen.query_one("#batch-pane", Static)
    await until(pilot, lambda: "nightly-eval" in plain(pane.content))


async def open_mirror(pilot: Pilot) -> None:
    await _mode(pilot, "i", "MirrorScreen", "#revisions")
    peers = pilot.app.screen.query_one("#peers", DataTable)
    await until(pilot, lambda: peers.row_count > 0)


async def open_mirror_add(pilot: Pilot) -> None:
    await open_mirror(pilot)
    await pilot.press("a")
    await until(pilot, lambda: _on(pilot, "MirrorAddDialog"))
    pilot.app.screen.query_one("#add-source", Input).value = "hf:Qwen/Qwen3-8B@main"
    pilot.app.screen.query_one("#add-include", Input).value = "*.safetensors"
    await pilot.pause()


async def open_mcp(pilot: Pilot) -> None:
    await _mode(pilot, "j", "McpScreen", "#mcp-servers")
    grants = pilot.app.screen.query_one("#mcp-grants", DataTable)
    await until(pilot, lambda: grants.row_count > 0)


async def open_settings(pilot: Pilot) -> None:
    await _mode(pilot, "w", "SettingsScreen", "#settings-history")
    diff = pilot.app.screen.query_one("#settings-diff")
    await until(pilot, lambda: diff.display)


async def open_node_overview(pilot: Pilot) -> None:
    await until(pilot, lambda: getattr(pilot.app.screen, "facts", None) is not None)
    await pilot.pause()


async def open_agent_yaml(pilot: Pilot) -> None:
    await pilot.press("y")
    await until(pilot, lambda: _on(pilot, "AgentYamlScreen"))
    body = pilot.app.screen.query_one("#agent-yaml", Static)
    await until(pilot, lambda: "node_id" in plain(body.content))


async def open_setup_parts(pilot: Pilot) -> None:
    await until(pilot, lambda: _on(pilot, "PartsScreen"))
    await pilot.pause()


async def open_setup_plan(pilot: Pilot) -> None:
    await open_setup_parts(pilot)
    await pilot.press("p")
    await until(pilot, lambda: _on(pilot, "PlanScreen") and pilot.app.screen.checked)
    await pilot.pause()


@dataclass(frozen=True)
class Scene:
    """One screen of one console with fixed data: ``make`` the app, ``open`` the screen."""

    name: str
    console: str  # "cluster", "node" or "setup"
    title: str
    open: Callable[[Pilot], Awaitable[None]]
    # The console runs on the control plane (with its files: Add node needs them).
    on_control_plane: bool = False

    def make(self, workdir: Path) -> App:
        if self.console == "node":
            return node_console(workdir)
        if self.console == "setup":
            return setup_console()
        paths = Paths.under(workdir / "cp") if self.on_control_plane else None
        return LlmgwApp(FixedAdmin(), paths=paths)  # type: ignore[arg-type]


SCENES = [
    Scene("overview", "cluster", "Overview (o)", open_overview),
    Scene("nodes", "cluster", "Nodes (n)", open_nodes),
    Scene("node-details", "cluster", "A node's details (Enter on Nodes)", open_node_details),
    Scene("node-weights", "cluster", "The weights a node keeps (f on Nodes)", open_node_weights),
    Scene(
        "add-node",
        "cluster",
        "Add a node (a on Nodes), joined",
        open_add_node,
        on_control_plane=True,
    ),
    Scene("models", "cluster", "Models (m)", open_models),
    Scene("serve", "cluster", "Serve a model (a on Models), planned", open_serve),
    Scene("explain", "cluster", "Explain placement (e on Models)", open_explain),
    Scene("replicas", "cluster", "Replicas (p)", open_replicas),
    Scene(
        "replica-details",
        "cluster",
        "A replica's history (Enter on Replicas)",
        open_replica_details,
    ),
    Scene("keys", "cluster", "Keys & tenancy (k)", open_keys),
    Scene("usage", "cluster", "Usage (u)", open_usage),
    Scene("batches", "cluster", "Batches (b)", open_batches),
    Scene("mirror", "cluster", "Mirror (i)", open_mirror),
    Scene("mirror-add", "cluster", "Add to the mirror (a on Mirror)", open_mirror_add),
    Scene("mcp", "cluster", "MCP (j)", open_mcp),
    Scene("settings", "cluster", "Settings (w)", open_settings),
    Scene("node-overview", "node", "Node console: Overview (o)", open_node_overview),
    Scene("node-agent-yaml", "node", "Node console: agent.yaml (y)", open_agent_yaml),
    Scene("setup-parts", "setup", "Setup: the parts", open_setup_parts),
    Scene("setup-plan", "setup", "Setup: the plan (p)", open_setup_plan),
]


def plain(renderable, width: int = 200) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def screen_text(app: App) -> str:
    """The terminal as text, as ``App.export_screenshot`` draws it (modal dialogs over
    the screens beneath), without colour."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system=None,
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    update = app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens, simplify=True
    )
    console.print(update)
    lines = console.export_text(styles=False).splitlines()
    return "\n".join(line.rstrip() for line in lines[:height])


@contextlib.contextmanager
def fixed_place() -> Iterator[Path]:
    """A fresh working directory and UTC clock for the length of a scene: the node
    console's agent.yaml path and times of day read the same on every machine."""
    tz = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
            yield Path(tmp)
    finally:
        if tz is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = tz
        time.tzset()


async def capture(scene: Scene, size: tuple[int, int]) -> str:
    """``scene`` at ``size`` as text (for docs/console.md)."""
    with fixed_place() as workdir:
        app = scene.make(workdir)
        async with app.run_test(size=size) as pilot:
            await scene.open(pilot)
            await pilot.pause()
            return screen_text(app)
