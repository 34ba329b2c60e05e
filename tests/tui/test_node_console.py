"""The node console (``sudo llmgw`` on a node) against a real agent, driven by Textual's pilot.

The agent runs on a recorded inventory (a hardware fixture); NVML knows nothing
of that, so the console is given the same recording to read its GPUs from.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from llmgw.inventory import Inventory
from llmgw.paths import Paths
from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for
from tui.node import NodeConsole
from tui.node.agent_yaml import HIDDEN, redact
from tui.node.app import ConfirmRestart
from tui.node.gpus import NO_DRIVER, InventoryGpuReader, NvmlGpuReader
from tui.node.service import SystemdService

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hardware"
SIZE = (120, 40)


def recorded_gpus(name: str) -> InventoryGpuReader:
    inventory = Inventory.model_validate_json((FIXTURES / f"{name}.json").read_bytes())
    return InventoryGpuReader(inventory, name)


def text(app: NodeConsole, selector: str, width: int = 200) -> str:
    """A Static's content as plain text, as a terminal ``width`` columns wide shows it."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(app.screen.query_one(selector, Static).content)
    return console.export_text()


def rows(app: NodeConsole, table_id: str) -> list[list[str]]:
    t = app.screen.query_one(f"#{table_id}", DataTable)
    return [[str(c) for c in t.get_row(key)] for key in t.rows]


def shown(app: NodeConsole, selector: str) -> bool:
    return app.screen.query_one(selector).display


async def wait_until(pilot: Pilot, cond: Callable[[], bool], *, tries: int = 200) -> None:
    """Let the app and the agent work until ``cond`` holds; at most ``tries`` × 50 ms."""
    for _ in range(tries):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"gave up waiting for {cond.__doc__ or cond}")


def notes(app: NodeConsole) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        yield c


async def started(cluster, node_id: str, fixture: str):
    """An agent whose agent.yaml is where the console reads it, and the agent running."""
    cfg = cluster.agent_config(node_id, fixture=fixture)
    cluster.paths.agent_yaml.write_text(
        f"node_id: {node_id}\ncontrol_planes: [{cluster.agent_address}]\n"
        "# recorded hardware: see tests/fixtures/hardware\n"
        f"hardware: {{probe: fake, fixture: {fixture}}}\n"
    )
    await cluster.start_agent(node_id, cfg=cfg)


def connected(app: NodeConsole) -> bool:
    facts = app.screen.facts if hasattr(app.screen, "facts") else None
    return bool(facts and facts.status and facts.status.state == "connected")


async def test_the_overview_shows_the_node_its_control_plane_answering_and_its_gpus(cluster):
    await started(cluster, "node-o", "l4_24g_x4")
    app = NodeConsole(cluster.paths, gpus=recorded_gpus("l4_24g_x4"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: connected(app))
        agent = text(app, "#agent")
        assert "Node node-o" in agent and f"connected to {cluster.agent_address}" in agent
        [plane] = rows(app, "planes")
        assert plane[:3] == [cluster.agent_address, "agent.yaml", "connected"]
        assert plane[3].startswith("answers in")
        gpus = rows(app, "gpus")
        assert [g[:2] for g in gpus] == [[str(i), "NVIDIA L4"] for i in range(4)]
        assert all(g[2].endswith("0.0/22.5 GiB") and g[5] == "-" for g in gpus)
        note = text(app, "#gpu-note")
        assert "recorded GPUs (l4_24g_x4), not NVML's" in note
        assert "the agent reports recorded hardware (fake:l4_24g_x4)" in note
        assert "sim" in [e[0] for e in rows(app, "engines")]
        disks = text(app, "#disks")
        assert "weights" in disks and "engines" in disks and "free of" in disks
        assert shown(app, "#shards-empty") and not shown(app, "#shards")
        assert "-error" not in app.screen.query_one("#status").classes


async def test_a_model_placed_on_a_gpu_is_shown_on_that_gpu(cluster):
    await started(cluster, "node-m", "l4_24g_x4")
    spec = ModelSpec(
        name="sim-on-gpu",
        source="/models/none.gguf",
        profiles=[
            ModelProfile(
                name="default",
                engine="sim",
                startup_timeout_s=60,
                gpu=GpuNeed(count=1, min_memory_bytes=8 * 2**30),
            )
        ],
        replicas_min=1,
        replicas_max=1,
        slots=1,
    )
    async with cluster.admin() as admin:
        await admin.put_model(spec)

    async def ready():
        async with cluster.admin() as admin:
            rs = (await admin.list_replicas("sim-on-gpu")).replicas
        return rs[0] if rs and rs[0].state == "ready" else None

    replica = await wait_for(ready, attempts=400)
    [index] = replica.gpu_indexes
    app = NodeConsole(cluster.paths, gpus=recorded_gpus("l4_24g_x4"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(rows(app, "shards")) == 1)
        [shard] = rows(app, "shards")
        assert shard[:5] == ["sim-on-gpu", "ready", str(replica.port), str(replica.pid), str(index)]
        on_gpus = {int(g[0]): g[5] for g in rows(app, "gpus")}
        assert on_gpus[index] == "sim-on-gpu"
        assert [m for i, m in on_gpus.items() if i != index] == ["-", "-", "-"]


async def test_with_no_agent_one_line_says_so_and_how_to_start_it(tmp_path):
    paths = Paths.under(tmp_path / "home")
    paths.config_dir.mkdir(parents=True)
    # A control plane that is not there: the console still knocks on it.
    paths.agent_yaml.write_text("node_id: lonely\ncontrol_planes: [127.0.0.1:9]\n")
    app = NodeConsole(paths, gpus=recorded_gpus("rtx6000_24g_x1"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(rows(app, "planes")))
        line = text(app, "#agent", width=1000)  # one line, however long its path
        assert "the agent is not running here" in line
        assert "sudo systemctl start llmgw-agent (or run: llmgw agent)" in line
        assert len(line.strip().splitlines()) == 1
        assert "-error" in app.screen.query_one("#agent").classes
        # What needs the agent is hidden; what does not is still read.
        for part in ("#engines-part", "#shards-part", "#disks-part", "#warnings-part"):
            assert not shown(app, part)
        [plane] = rows(app, "planes")
        assert plane[0] == "127.0.0.1:9" and plane[2] == "agent not running"
        assert plane[3].startswith("no answer")
        assert [g[1] for g in rows(app, "gpus")] == ["Quadro RTX 6000"]


class NoDriverNvml:
    """pynvml on a machine without the NVIDIA driver (what nvidia-ml-py raises there)."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED

    def nvmlInit(self) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


async def test_with_no_driver_the_gpus_are_one_line(tmp_path):
    app = NodeConsole(Paths.under(tmp_path), gpus=NvmlGpuReader(lib=NoDriverNvml()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.screen.facts is not None)
        assert text(app, "#gpu-note").strip() == NO_DRIVER
        assert not shown(app, "#gpus")


def test_the_real_nvml_reader_never_raises_here():
    report = NvmlGpuReader().read()
    # Either this machine has GPUs and each is named, or one line says why not.
    assert (report.gpus and all(g.name for g in report.gpus)) or report.note


async def test_at_80x24_every_page_renders_and_scrolls_without_errors(cluster):
    await started(cluster, "node-small", "h100_80g_x8")
    app = NodeConsole(cluster.paths, gpus=recorded_gpus("h100_80g_x8"))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: connected(app))
        assert len(rows(app, "gpus")) == 8
        await pilot.press("end")
        await pilot.press("home")
        await pilot.press("y")
        await wait_until(pilot, lambda: "node_id: node-small" in text(app, "#agent-yaml", 78))
        await pilot.press("o")
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmRestart)
        await pilot.press("escape")
        assert not isinstance(app.screen, ConfirmRestart)
        await pilot.pause()
        assert "-error" not in app.screen.query_one("#status").classes


def test_secrets_in_agent_yaml_are_hidden_and_comments_kept():
    original = (
        "# this node's bootstrap\n"
        "node_id: n1\n"
        "control_planes: [cp1:7070]\n"
        "admin_token: s3cret-value\n"
        "store:\n"
        "  dsn: postgresql://llmgw:pw@db/llmgw\n"
        "pki: {key: /etc/llmgw/pki/node.key}\n"
    )
    shown_text = redact(original)
    assert "s3cret-value" not in shown_text and "pw@db" not in shown_text
    assert f"admin_token: {HIDDEN}" in shown_text and f"  dsn: {HIDDEN}" in shown_text
    # Paths and comments are not secrets.
    assert "# this node's bootstrap" in shown_text and "/etc/llmgw/pki/node.key" in shown_text


async def test_the_agent_yaml_page_hides_secrets_and_says_what_the_agent_thinks(tmp_path):
    paths = Paths.under(tmp_path)
    paths.config_dir.mkdir(parents=True)
    paths.agent_yaml.write_text("node_id: n1\ncontrol_planes: [cp1:7070]\ntoken: s3cret\n")
    app = NodeConsole(paths, gpus=recorded_gpus("cpu_only_16c"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("y")
        await wait_until(pilot, lambda: "node_id: n1" in text(app, "#agent-yaml"))
        page = text(app, "#agent-yaml")
        assert "s3cret" not in page and HIDDEN in page
        assert "unknown key 'token'" in page


async def test_with_no_agent_yaml_the_page_says_how_to_make_this_machine_a_node(tmp_path):
    app = NodeConsole(Paths.under(tmp_path), gpus=recorded_gpus("cpu_only_16c"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("y")
        await wait_until(pilot, lambda: "there is no agent.yaml" in text(app, "#agent-yaml"))
        # Read as words: the page names a path as long as the test's folder.
        assert "llmgw node add HOST" in " ".join(text(app, "#agent-yaml").split())


def fake_systemctl(tmp_path: Path, *, booted: bool = True) -> tuple[str, Path]:
    """A shell script that plays systemctl: the unit is loaded; restart leaves a mark."""
    mark = tmp_path / "restarted"
    script = tmp_path / "systemctl"
    if booted:
        body = (
            'case "$1" in\n'
            "  show) echo loaded ;;\n"
            f'  restart) echo "$2" > {mark} ;;\n'
            "  *) exit 1 ;;\n"
            "esac\n"
        )
    else:
        body = (
            'echo "System has not been booted with systemd as init system (PID 1).'
            " Can't operate.\"\nexit 1\n"
        )
    script.write_text("#!/bin/sh\n" + body)
    os.chmod(script, 0o755)
    return str(script), mark


async def test_restart_asks_first_then_restarts_the_service(tmp_path):
    systemctl, mark = fake_systemctl(tmp_path)
    app = NodeConsole(
        Paths.under(tmp_path / "home"),
        gpus=recorded_gpus("cpu_only_16c"),
        service=SystemdService(systemctl=systemctl),
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmRestart)
        await pilot.press("n")
        await pilot.pause()
        assert not mark.exists()
        await pilot.press("R")
        await pilot.click("#restart-yes")  # the mouse works as well as y
        await wait_until(pilot, lambda: any("Agent restarted" in n for n in notes(app)))
        assert mark.read_text().strip() == "llmgw-agent"


async def test_restart_without_systemd_says_how_to_do_it(tmp_path):
    systemctl, mark = fake_systemctl(tmp_path, booted=False)
    app = NodeConsole(
        Paths.under(tmp_path / "home"),
        gpus=recorded_gpus("cpu_only_16c"),
        service=SystemdService(systemctl=systemctl),
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("R")
        await pilot.press("y")
        await wait_until(pilot, lambda: any("not restarted" in n for n in notes(app)))
        [note] = [n for n in notes(app) if "not restarted" in n]
        assert "systemd cannot be asked here (System has not been booted" in note
        assert "stop `llmgw agent`" in note
        assert not mark.exists()


async def test_the_gpus_show_their_pcie_links_nvlink_peers_and_the_hosts_memory_bandwidth(
    cluster, tmp_path
):
    import json

    data = json.loads((FIXTURES / "a100_40g_x2_nvlink.json").read_text())
    data["host"]["mem_bandwidth_gbs"] = 41.9
    for gpu in data["gpus"]:
        gpu.update(pcie_gen=1, pcie_width=16, pcie_gen_max=4, pcie_width_max=16)
    fixture = tmp_path / "a100_pair.json"
    fixture.write_text(json.dumps(data))
    await started(cluster, "node-l", str(fixture))
    reader = InventoryGpuReader(Inventory.model_validate(data), "a100_pair")
    app = NodeConsole(cluster.paths, gpus=reader)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: connected(app))
        assert "memory 41.9 GB/s (measured)" in text(app, "#agent")
        gpus = rows(app, "gpus")
        assert [g[6:] for g in gpus] == [["1×16 (max 4×16)", "1"], ["1×16 (max 4×16)", "0"]]


def test_the_nvml_reader_lists_mig_instances_after_the_cards_as_the_agent_numbers_them():
    from tests.agentd.fake_pynvml import A100_MIG, FakePynvml

    report = NvmlGpuReader(FakePynvml(A100_MIG)).read()
    assert [(g.index, g.name.split()[-1]) for g in report.gpus] == [
        (0, "A100-SXM4-80GB"),
        (1, "A100-SXM4-80GB"),
        (2, "3g.40gb"),
        (3, "1g.10gb"),
        (4, "1g.10gb"),
    ]
    # A Vulkan engine holds its memory as a graphics process.
    assert report.gpus[4].pids == (5151,) and report.gpus[2].memory_used_bytes == 2 * 2**30
