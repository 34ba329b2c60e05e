"""Node labels: Kubernetes' rules for keys and values, agent.yaml's labels:, and k=v on a command line."""

from __future__ import annotations

import pytest

from llmgw.config import load_agent_config
from llmgw.errors import ConfigError, UsageError
from llmgw.labels import (
    check_keys,
    check_labels,
    effective,
    key_problem,
    labels_text,
    parse_assignments,
    value_problem,
)


@pytest.mark.parametrize(
    "key", ["zone", "llmgw.role", "a", "rack-7", "example.com/rack", "x_y.z", "A" * 63]
)
def test_keys_as_kubernetes_allows_them_are_labels(key):
    assert key_problem(key) is None


@pytest.mark.parametrize(
    "key",
    ["", "-zone", "zone-", "zone!", "with space", "A" * 64, "Example.com/rack", "/rack", "a/"],
)
def test_keys_kubernetes_refuses_are_refused_in_words(key):
    assert key_problem(key).startswith(f"label key {key!r}")


def test_values_may_be_empty_or_names_of_63_characters_at_most():
    assert value_problem("zone", "") is None
    assert value_problem("zone", "eu-west.1") is None
    assert "at most 63" in value_problem("zone", "a" * 64)
    assert value_problem("zone", "a b") is not None


def test_command_line_assignments_are_parsed_and_checked():
    assert parse_assignments(["zone=a", "llmgw.role=judge", "empty="]) == {
        "zone": "a",
        "llmgw.role": "judge",
        "empty": "",
    }
    with pytest.raises(UsageError, match="--label 'zone' is not KEY=VALUE"):
        parse_assignments(["zone"], flag="--label")
    with pytest.raises(UsageError, match="label key 'bad key'"):
        parse_assignments(["bad key=1"])
    assert check_keys(["zone", " rack "]) == ["zone", "rack"]
    with pytest.raises(UsageError):
        check_keys(["no!"])


def test_the_operators_labels_win_over_the_nodes_own():
    assert effective({"zone": "a", "rack": "r1"}, {"zone": "b"}) == {"zone": "b", "rack": "r1"}
    assert labels_text({"zone": "b", "rack": "r1"}) == "rack=r1, zone=b"
    assert labels_text({}) == "-"
    with pytest.raises(ValueError, match="label key 'a b'"):
        check_labels({"a b": "c"})


def _agent_yaml(tmp_path, labels: str):
    path = tmp_path / "agent.yaml"
    path.write_text(f"node_id: n1\ncontrol_planes: 127.0.0.1:7070\n{labels}")
    return path


def test_agent_yaml_takes_a_map_of_labels(tmp_path):
    cfg = load_agent_config(_agent_yaml(tmp_path, "labels:\n  zone: a\n  llmgw.role: judge\n"))
    assert cfg.labels == {"zone": "a", "llmgw.role": "judge"}
    assert load_agent_config(_agent_yaml(tmp_path, "labels:\n")).labels == {}


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        ("labels: [zone]\n", "labels is a map of KEY: VALUE"),
        ("labels:\n  zone: 7\n", "must be text (quote it in YAML: zone: '7')"),
        ("labels:\n  'bad key': a\n", "label key 'bad key'"),
    ],
)
def test_agent_yaml_refuses_labels_that_are_not_labels_naming_the_key(tmp_path, labels, said):
    with pytest.raises(ConfigError, match="key 'labels'") as refused:
        load_agent_config(_agent_yaml(tmp_path, labels))
    assert said in refused.value.message
