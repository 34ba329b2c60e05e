"""`llmgw ctl node label` as an operator types it, against `llmgw up`'s own node."""

from __future__ import annotations

import json

import pytest
import yaml

from llmgw.errors import ExitCode
from tests.e2e.helpers import init_on_free_ports, llmgw, nodes_json, start, wait_until

NODE = "lab-1"


@pytest.fixture(scope="module")
def labelled_up(tmp_path_factory):
    """`llmgw up` with one node whose agent.yaml says zone: a (no starter model).

    One for the module, as starting it is most of each test's time: every test
    leaves the node's labels as agent.yaml gives them.
    """
    home = tmp_path_factory.mktemp("labels") / "home"
    init_on_free_ports(home, "--node", "--node-id", NODE, "--no-starter")
    agent_yaml = home / "etc" / "agent.yaml"
    cfg = yaml.safe_load(agent_yaml.read_text())
    cfg["labels"] = {"zone": "a"}
    agent_yaml.write_text(yaml.safe_dump(cfg))
    up = start(home, "up")
    try:
        wait_until(lambda: [n["state"] for n in nodes_json(home) or []] == ["ready"], timeout_s=60)
        yield home
    finally:
        up.terminate()
        print(up.communicate(timeout=30)[0])


def label(home, *args: str):
    return llmgw(home, "ctl", "node", "label", NODE, *args)


def test_node_label_sets_over_agent_yaml_and_rm_brings_agent_yaml_back(labelled_up):
    home = labelled_up
    (node,) = nodes_json(home)
    assert node["labels"] == {"zone": "a"}

    set_ = label(home, "rack=r7", "zone=b", "--json")
    assert set_.returncode == 0, set_.stderr
    view = json.loads(set_.stdout)  # the whole of stdout is the NodeView
    assert view["node_id"] == NODE and view["labels"] == {"rack": "r7", "zone": "b"}

    people = llmgw(home, "ctl", "nodes", COLUMNS="200")
    assert people.returncode == 0 and "LABELS" in people.stdout
    assert "rack=r7, zone=b" in people.stdout
    shown = llmgw(home, "ctl", "node", "show", NODE, COLUMNS="200")
    assert "rack=r7, zone=b" in shown.stdout

    removed = label(home, "--rm", "zone", "--json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["labels"] == {"rack": "r7", "zone": "a"}

    said = label(home, "--rm", "rack")
    assert said.returncode == 0, said.stderr
    assert "zone=a" in said.stdout and "rack" not in said.stdout
    assert "llmgw ctl explain-placement" in said.stdout


def test_node_label_refuses_what_it_cannot_do_in_words(labelled_up):
    home = labelled_up
    only_yaml = label(home, "--rm", "zone")
    assert only_yaml.returncode == ExitCode.USAGE
    assert "zone=a comes from the node's agent.yaml" in only_yaml.stderr

    bad = label(home, "Zone!=x")
    assert bad.returncode == ExitCode.USAGE and "label key 'Zone!'" in bad.stderr
    not_pair = label(home, "zone")
    assert not_pair.returncode == ExitCode.USAGE and "is not KEY=VALUE" in not_pair.stderr
    nothing = label(home)
    assert nothing.returncode == ExitCode.USAGE and "--rm KEY" in nothing.stderr

    unknown = llmgw(home, "ctl", "node", "label", "nope", "zone=a")
    assert unknown.returncode == ExitCode.NOT_FOUND and "no node named 'nope'" in unknown.stderr
    assert nodes_json(home)[0]["labels"] == {"zone": "a"}


def test_a_model_served_with_a_label_says_in_explain_placement_why_the_node_is_refused(
    labelled_up,
):
    home = labelled_up
    served = llmgw(
        home, "ctl", "model", "serve", "/m/x.gguf", "--engine", "sim", "--name", "west",
        "--label", "zone=w", "--json",
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["spec"]["labels"] == {"zone": "w"}

    explained = json.loads(llmgw(home, "ctl", "explain-placement", "west", "--json").stdout)
    assert explained.get("placement") is None
    assert explained["reasons"] == [
        {"node_id": NODE, "reason": "labels do not match: needs zone=w, node has zone=a"}
    ]
    people = llmgw(home, "ctl", "explain-placement", "west", COLUMNS="200")
    assert "labels do not match: needs zone=w, node has zone=a" in people.stdout

    bad = llmgw(home, "ctl", "model", "serve", "/m/y.gguf", "--name", "y", "--label", "zone")
    assert bad.returncode == ExitCode.USAGE and "--label 'zone' is not KEY=VALUE" in bad.stderr
