"""Which console bare ``llmgw`` opens, by what this machine is."""

from __future__ import annotations

from llmgw.cli.main import which_console
from llmgw.errors import ExitCode
from llmgw.paths import Paths
from tests.e2e.helpers import llmgw


def test_a_control_plane_opens_the_cluster_console_a_node_its_own_and_else_setup(tmp_path):
    paths = Paths.under(tmp_path)
    assert which_console(paths) == "setup"
    paths.agent_yaml.parent.mkdir(parents=True, exist_ok=True)
    paths.agent_yaml.write_text("node_id: n1\n")
    assert which_console(paths) == "node"
    paths.server_yaml.write_text("cluster_name: x\n")
    assert which_console(paths) == "cluster"


def test_an_unknown_console_is_refused(tmp_path):
    res = llmgw(tmp_path, "console", "dashboard")
    assert res.returncode == ExitCode.USAGE and "cluster, node or setup" in res.stderr
