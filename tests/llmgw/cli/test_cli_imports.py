"""What ``llmgw version`` and ``llmgw ctl status`` import: the CLI starts in a blink.

Issue 28: ``llmgw version`` took 1.6 s, nearly all of it importing every
command's module (asyncssh, the generated proto, the onboarding stack, every
group's presenters) before doing anything. Each command is run in a process
of its own, as a person runs it, and the modules it imported are read back.
A budget on modules, not on a time, so that a busy machine cannot fail it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.config import load_server_config
from llmgw.errors import ConfigError, ExitCode

ROOT = Path(__file__).resolve().parents[3]

# Runs the console script's main() and writes, at exit, every module imported.
RUN_AND_LIST = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "llmgw"
from llmgw.cli.main import main
main()
"""

# Never needed to print a version or to answer that there is no control plane here.
HEAVY = (
    "asyncssh",
    "textual",
    "proto",
    "grpclib",
    "betterproto2",
    "gatewayd",
    "agentd",
    "tui",
    "mirrord",
    "uvicorn",
    "aiohttp",
    "yaml",
    "pydantic",
    "asyncio",
    "psutil",
    "llmgw.config",
    "llmgw.admin_client",
    "llmgw.onboard",
    "llmgw.setup",
    "llmgw.catalog",
)


def run_llmgw(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``llmgw ARGS`` in a process of its own, on an empty LLMGW_HOME; and what it imported."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    listed = tmp_path / "modules.json"
    env = {**os.environ, "LLMGW_HOME": str(home), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, str(listed), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, set(json.loads(listed.read_text()))


def heavy_ones(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def ours(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "llmgw" or m.startswith("llmgw.")}


def test_llmgw_version_imports_the_command_table_and_nothing_of_the_commands(tmp_path):
    proc, modules = run_llmgw(tmp_path, "version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("llmgw ")
    assert heavy_ones(modules) == []
    # Not even rich: printing a version draws nothing.
    assert "rich" not in modules
    assert ours(modules) == {
        "llmgw",
        "llmgw.cli",
        "llmgw.cli.lazy",
        "llmgw.cli.main",
        "llmgw.paths",
    }


def test_llmgw_version_json_prints_the_version_alone(tmp_path):
    from llmgw import __version__

    proc, modules = run_llmgw(tmp_path, "version", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"version": __version__}
    assert heavy_ones(modules) == []


def test_ctl_status_without_a_control_plane_says_so_without_loading_the_client(tmp_path):
    proc, modules = run_llmgw(tmp_path, "ctl", "status", "--json")
    # The words and exit code the client's own reading of server.yaml gives.
    missing = tmp_path / "home" / "etc" / "server.yaml"
    with pytest.raises(ConfigError) as told:
        load_server_config(missing)
    assert proc.returncode == int(told.value.exit_code) == int(ExitCode.CONFIG)
    assert proc.stdout == ""
    assert proc.stderr == f"error: {told.value.message}\n  {told.value.hint}\n"
    assert heavy_ones(modules) == []
    assert ours(modules) == {
        "llmgw",
        "llmgw.cli",
        "llmgw.cli.lazy",
        "llmgw.cli.main",
        "llmgw.cli.ctl",
        "llmgw.cli.ctl.app",
        "llmgw.cli.ctl.call",
        "llmgw.cli.ctl.cluster",
        "llmgw.errors",
        "llmgw.labels",
        "llmgw.paths",
        "llmgw.present",
        "llmgw.present.output",
    }


@pytest.mark.parametrize(
    ("args", "exit_code"),
    # A bare `llmgw ctl` shows its help as a usage error does (2).
    [(["--help"], 0), (["ctl", "--help"], 0), (["ctl"], 2), (["node", "--help"], 0)],
)
def test_a_groups_help_lists_its_commands_without_importing_them(tmp_path, args, exit_code):
    proc, modules = run_llmgw(tmp_path, *args)
    assert proc.returncode == exit_code, proc.stderr
    assert "Commands" in proc.stdout
    assert heavy_ones(modules) == []
    commands = {m for m in ours(modules) if m.startswith("llmgw.cli.")}
    assert commands <= {"llmgw.cli.lazy", "llmgw.cli.main", "llmgw.cli.ctl", "llmgw.cli.ctl.app"}


def test_a_command_imports_its_own_module_only(tmp_path):
    # `ctl keys --help` loads the keys module; the MCP, mirror and usage ones stay out.
    proc, modules = run_llmgw(tmp_path, "ctl", "keys", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "llmgw.cli.ctl.keys" in modules
    for other in ("mcp", "mirror", "usage", "models", "weights", "config", "bench"):
        assert f"llmgw.cli.ctl.{other}" not in modules
    assert not any(m.startswith(("asyncssh", "textual", "llmgw.onboard")) for m in modules)
