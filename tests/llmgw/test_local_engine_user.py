"""Who the local node's engines run as: the user running `llmgw up`, never root."""

from __future__ import annotations

import getpass
import os

from llmgw.config import load_agent_config
from llmgw.paths import Paths
from llmgw.setup import cluster_init
from llmgw.setup.cluster_init import local_engine_user


def test_engines_of_llmgw_up_run_as_the_user_who_runs_it():
    assert local_engine_user(1000, "alice") == "alice"


def test_under_sudo_the_engine_user_is_left_to_the_agent_which_uses_llmgw_engine():
    # Guards `sudo llmgw server init --node` writing engine_user: root.
    assert local_engine_user(0, "root") == ""


def test_the_local_agent_yaml_never_names_root(tmp_path):
    paths = Paths.under(tmp_path / "home")
    cluster_init.init_server(paths, hosts=[])
    cfg = load_agent_config(cluster_init.write_local_agent(paths, "local", ["127.0.0.1:7070"]))
    assert cfg.engine_user == ("" if os.geteuid() == 0 else getpass.getuser())
