"""The kept settings document: keys as people write them, and refusals that say what a key expects."""

from __future__ import annotations

import pytest

from llmgw.config import ServerConfig
from llmgw.errors import UsageError
from llmgw.settings import ClusterSettings, SettingsRefused, check_document, load_document
from llmgw.settings.check import dump_document
from llmgw.settings.keys import (
    diff,
    flatten,
    format_key,
    get_at,
    parse_assignment,
    parse_key,
    set_at,
)


def _set(*assignments: str) -> ClusterSettings:
    doc = ClusterSettings().as_dict()
    for text in assignments:
        parts, value = parse_assignment(text)
        doc = set_at(doc, parts, value)
    return check_document(doc)


def _refusal(*assignments: str) -> str:
    with pytest.raises(SettingsRefused) as refused:
        _set(*assignments)
    return refused.value.message


def test_a_key_is_dotted_names_with_positions_and_odd_names_in_brackets():
    assert parse_key("router.admission.bands[0].queue_ttl") == [
        "router",
        "admission",
        "bands",
        0,
        "queue_ttl",
    ]
    assert parse_key("agents.nodes[gpu.1].log_level") == ["agents", "nodes", "gpu.1", "log_level"]
    for key in ("router.admission.bands[0].queue_ttl", "agents.nodes[gpu.1].log_level"):
        assert format_key(parse_key(key)) == key
    for bad in ("a..b", "a.", ".a", "a[", "a[]", ""):
        with pytest.raises(UsageError):
            parse_key(bad)


def test_a_bad_value_is_refused_naming_the_key_and_what_it_expects():
    # The issue's own example: the key, then what it expects, in plain words.
    assert _refusal("router.admission.bands[0].queue_ttl=-1") == (
        "router.admission.bands[0].queue_ttl: must be greater than 0 (got -1)"
    )
    assert _refusal("router.admission.bands[0].max_queue=lots") == (
        "router.admission.bands[0].max_queue: must be a whole number (got 'lots')"
    )
    assert _refusal("agents.nodes.gpu-1.log_level=verbose") == (
        "agents.nodes.gpu-1.log_level: must be 'debug', 'info', 'warning' or 'error' "
        "(got 'verbose')"
    )
    assert "limits.key_default.rpm: must be at least 1" in _refusal("limits.key_default.rpm=0")
    assert _refusal("router.admission.default_band=gold") == (
        "router.admission.default_band: must be one of the bands (default), not 'gold'"
    )


def test_every_problem_of_a_document_is_named_at_once():
    message = _refusal("nodes.not_ready_grace_s=0", "mirror.probe_interval_s=-3")
    assert "nodes.not_ready_grace_s: must be greater than 0" in message
    assert "mirror.probe_interval_s: must be greater than 0" in message


def test_keys_that_stay_in_server_yaml_or_agent_yaml_are_refused_saying_where_they_stay():
    assert "listen: is server.yaml's" in _refusal("listen.http=0.0.0.0:8080")
    assert "store: is server.yaml's" in _refusal("store.dsn=postgresql://x/y")
    assert "agents.default.node_id: stays in the node's agent.yaml" in _refusal(
        "agents.default.node_id=gpu-9"
    )
    assert (
        "the agent settings are: heartbeat_interval_ms, log_level, hub_url, "
        "weights_cache_percent, weights_cache_max_bytes"
    ) in _refusal("agents.nodes.gpu-1.colour=blue")


def test_rules_across_keys_name_the_key_to_change():
    # A heartbeat as long as the grace marks a node not ready between two beats.
    message = _refusal("agents.nodes.gpu-1.heartbeat_interval_ms=10000")
    assert message.startswith("agents.nodes.gpu-1.heartbeat_interval_ms: must be at most 7500")
    assert "nodes.lost_grace_s: must be at least" in _refusal("nodes.lost_grace_s=5")


def test_a_value_is_read_as_yaml_so_durations_and_lists_are_written_as_in_server_yaml():
    settings = _set(
        "router.admission.bands=[{name: gold, priority: 300, saturation_ceiling: 0.85},"
        " {name: bulk, priority: 50, saturation_ceiling: 0.3, queue_ttl: 5m}]",
        "router.admission.default_band=gold",
    )
    bands = {b.name: b for b in settings.router.admission.bands}
    assert bands["bulk"].queue_ttl == 300.0 and bands["gold"].priority == 300
    assert settings.router.admission.default_band == "gold"


def test_the_weights_cache_share_is_a_percent_and_its_cap_bytes_refused_past_them():
    settings = _set(
        "agents.default.weights_cache_percent=30",
        "agents.nodes.gpu-1.weights_cache_max_bytes=40000000000",
    )
    mine = settings.agents.for_node("gpu-1")
    assert (mine.weights_cache_percent, mine.weights_cache_max_bytes) == (30, 40_000_000_000)
    assert _refusal("agents.default.weights_cache_percent=0") == (
        "agents.default.weights_cache_percent: must be at least 1 (got 0)"
    )
    assert "must be at most 100 (got 150)" in _refusal("agents.default.weights_cache_percent=150")
    assert "weights_cache_max_bytes: must be at least 0 (got -1)" in _refusal(
        "agents.nodes.gpu-1.weights_cache_max_bytes=-1"
    )
    assert "must be a whole number" in _refusal("agents.default.weights_cache_percent=half")


def test_a_node_runs_on_its_own_entry_over_the_default():
    settings = _set(
        "agents.default.log_level=warning",
        "agents.default.heartbeat_interval_ms=1000",
        "agents.nodes.gpu-1.log_level=debug",
    )
    assert settings.agents.for_node("gpu-1").model_dump() == {
        "heartbeat_interval_ms": 1000,
        "log_level": "debug",
        "hub_url": None,
        "weights_cache_percent": None,
        "weights_cache_max_bytes": None,
    }
    assert settings.agents.for_node("gpu-2").log_level == "warning"
    # An entry set to nothing is removed.
    doc = set_at(settings.as_dict(), parse_key("agents.nodes.gpu-1"), None)
    assert check_document(doc).agents.nodes == {}


def test_a_key_that_is_not_there_is_named_with_the_keys_that_are():
    doc = ClusterSettings().as_dict()
    with pytest.raises(UsageError) as missing:
        get_at(doc, parse_key("router.admision"))
    assert missing.value.message == "no setting router.admision"
    assert "admission" in missing.value.hint
    assert get_at(doc, parse_key("router.admission.bands[0].max_queue")) == 1000
    with pytest.raises(UsageError):
        set_at(doc, parse_key("router.admission.bands[5].max_queue"), 1)


def test_the_difference_of_two_versions_names_each_changed_key_once():
    old = ClusterSettings().as_dict()
    new = _set("router.admission.bands[0].max_queue=5", "agents.nodes.gpu-1.log_level=debug")
    changes = diff(old, new.as_dict())
    assert [(c.key, c.kind, c.old, c.new) for c in changes] == [
        ("router.admission.bands[0].max_queue", "changed", 1000, 5),
        ("agents.nodes.gpu-1.log_level", "added", None, "debug"),
    ]
    assert diff(new.as_dict(), new.as_dict()) == []
    assert "router.admission.bands[0].name" in flatten(old)


def test_the_first_version_is_what_server_yaml_says():
    cfg = ServerConfig.model_validate(
        {
            "router": {
                "admission": {"bands": [{"name": "gold", "max_queue": 7}], "default_band": "gold"}
            },
            "mirror": {"urls": ["http://10.0.0.5:7080"], "probe_interval_s": 30},
            "nodes": {"not_ready_grace_s": 20},
        }
    )
    settings = ClusterSettings.from_server_config(cfg)
    assert settings.router.admission.bands[0].max_queue == 7
    assert settings.mirror.urls == ["http://10.0.0.5:7080"]
    assert settings.mirror.probe_interval_s == 30 and settings.nodes.not_ready_grace_s == 20


def test_a_document_written_as_yaml_loads_back_the_same_and_bad_yaml_says_where():
    settings = _set("agents.default.log_level=debug")
    assert load_document(dump_document(settings)) == settings
    with pytest.raises(SettingsRefused) as refused:
        load_document("router: [unclosed\n")
    assert "not valid YAML at line" in refused.value.message
