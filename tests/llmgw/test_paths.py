"""Where llmgw keeps its files: root's `llmgw up` home, and the starter beside the engines."""

from __future__ import annotations

from pathlib import Path

from llmgw.paths import ROOT_UP_HOME, Paths, user_home


def test_roots_up_home_lies_outside_root_where_the_engine_user_may_pass():
    # Issue 28: root's ~/.llmgw is under /root (0700), which llmgw-engine,
    # who runs root's engines, cannot enter.
    assert user_home(0) == ROOT_UP_HOME == Path("/var/lib/llmgw-up")
    assert user_home(1000) == Path("~/.llmgw").expanduser()


def test_the_starter_lies_beside_the_engines_not_in_the_control_planes_data_dir(tmp_path):
    paths = Paths.under(tmp_path)
    assert paths.models_dir == tmp_path / "opt" / "models"
    assert paths.models_dir.parent == paths.engines_dir.parent
    assert paths.server_data_dir not in paths.models_dir.parents
