"""Kept settings applied to a running control plane and its agents, without a restart.

Real gatewayd in-process on loopback, real agents over mutual TLS, the admin
client as ctl calls it.
"""

from __future__ import annotations

import logging

import pytest

from agentd.status import StatusView
from llmgw.errors import ConflictError, UsageError
from proto.llmgw.v1 import LimitsView
from tests.cluster_fixture import running_cluster, wait_for

# "Within 5 s": the bound for a change to be in force everywhere.
IN_FORCE_ATTEMPTS = 100  # × 0.05 s


async def test_a_band_changed_by_set_is_in_force_here_before_the_reply(cluster):
    async with cluster.admin() as admin:
        written = await admin.set_settings(
            ["router.admission.bands[0].max_queue=2", "router.admission.bands[0].queue_ttl=5s"],
            author="alice",
        )
        bands = cluster.server.gateway.bands.config.bands
        assert (bands[0].max_queue, bands[0].queue_ttl) == (2, 5.0)
        assert written.in_force.version == written.version.version == 2
        assert (await admin.get_settings()).version.author == "alice"


async def test_a_change_written_to_the_store_by_another_is_taken_within_seconds(tmp_path):
    # What another control plane's write looks like from here: a new version in
    # the store, nothing else. The runtime follows the store; no restart.
    async with running_cluster(tmp_path) as c:
        runtime = c.server.settings
        doc = runtime.in_force.as_dict()
        doc["router"]["admission"]["bands"][0]["max_queue"] = 3
        await c.server.store.put_settings(
            doc, parent_version=1, author="elsewhere", comment="", at=runtime.since
        )
        await wait_for(
            lambda: c.server.gateway.bands.config.bands[0].max_queue == 3,
            attempts=IN_FORCE_ATTEMPTS,
        )
        assert runtime.version == 2

        # A version this control plane cannot load (a newer llmgw's key): reported,
        # skipped, and the one in force stays — never a half-applied document.
        await c.server.store.put_settings(
            doc | {"from_the_future": {}},
            parent_version=2,
            author="newer",
            comment="",
            at=runtime.since,
        )
        await wait_for(lambda: runtime.problems, attempts=IN_FORCE_ATTEMPTS)
        assert "version 3 cannot be loaded here" in runtime.problems[0]
        assert runtime.version == 2 and c.server.gateway.bands.config.bands[0].max_queue == 3


async def test_a_change_made_on_a_replaced_version_is_refused_naming_the_newest(tmp_path):
    async with running_cluster(tmp_path) as c, c.admin() as admin:
        await admin.set_settings(["nodes.not_ready_grace_s=20"], author="bob")
        with pytest.raises(ConflictError) as refused:
            await admin.set_settings(["nodes.not_ready_grace_s=30"], parent_version=1)
        assert "version 2 was written by bob" in refused.value.message
        with pytest.raises(UsageError) as bad:
            await admin.set_settings(["router.admission.bands[0].queue_ttl=-1"])
        assert "router.admission.bands[0].queue_ttl: must be greater than 0" in bad.value.message
        assert (await admin.settings_history()).versions[0].version == 2


async def test_node_timings_mirrors_and_key_limits_take_effect_live(tmp_path):
    async with running_cluster(tmp_path) as c, c.admin() as admin:
        await admin.set_settings(
            [
                "nodes.not_ready_grace_s=20",
                "nodes.lost_grace_s=600",
                "mirror.urls=[http://127.0.0.1:9]",
                "limits.key_default.rpm=7",
            ]
        )
        server = c.server
        assert server.registry._grace_s == 20 and server.reconciler._lost_grace_s == 600
        assert server.mirrors.urls == ["http://127.0.0.1:9"]
        # The first mirror of a cluster that had none is probed (and found down).
        await wait_for(lambda: server.mirrors.states()[0].state == "down", attempts=200)
        await admin.create_tenant("project", "acme/ml/chat", parents=True)
        made = await admin.create_key("acme/ml/chat", name="k")
        assert server.keys.lookup(made.secret).limits.rpm == 7
        # A key's own limit wins over the default.
        await admin.set_limits(LimitsView(scope=made.key_id, rpm=3))
        assert server.keys.lookup(made.secret).limits.rpm == 3


async def test_an_agent_gets_its_settings_on_register_and_again_when_they_change(tmp_path):
    async with running_cluster(tmp_path) as c, c.admin() as admin:
        # Kept before the node ever connects: it gets them as it registers.
        await admin.set_settings(["agents.default.hub_url=http://hub.example:8000"])
        agent, _, _ = await c.start_agent("cpu-a", fixture="cpu_only_16c")
        await c.wait_nodes_ready("cpu-a")
        await wait_for(lambda: agent.shards.fetcher.hf_base_url == "http://hub.example:8000")

        await admin.set_settings(["agents.nodes.cpu-a.heartbeat_interval_ms=500"])
        await wait_for(lambda: agent.heartbeat_interval_s == 0.5, attempts=IN_FORCE_ATTEMPTS)
        reply = await admin.get_settings()
        await wait_for(lambda: agent.live.version == 3, attempts=IN_FORCE_ATTEMPTS)
        status = StatusView(agent, agent.board).in_memory()
        assert status.settings_version == 3
        sources = {s.key: (s.value, s.source) for s in status.settings}
        assert sources["heartbeat_interval_ms"] == ("500", "cluster")
        assert sources["log_level"] == ("info", "agent.yaml")
        assert reply.in_force.version == 3


async def test_on_a_node_the_environment_beats_the_cluster_which_beats_agent_yaml(
    tmp_path, monkeypatch
):
    async with running_cluster(tmp_path) as c, c.admin() as admin:
        await admin.set_settings(
            ["agents.default.hub_url=http://kept.example", "agents.default.log_level=warning"]
        )
        monkeypatch.setenv("LLMGW_HUB_URL", "http://env.example")
        cfg = c.agent_config("cpu-a", fixture="cpu_only_16c")
        cfg.hub_url = "http://yaml.example"
        root = logging.getLogger()
        level = root.level
        try:
            agent, _, _ = await c.start_agent("cpu-a", cfg=cfg)
            await wait_for(lambda: agent.live.version == 2, attempts=IN_FORCE_ATTEMPTS)
            status = StatusView(agent, agent.board).in_memory()
        finally:
            root.setLevel(level)
        sources = {s.key: (s.value, s.source) for s in status.settings}
        assert sources["hub_url"] == ("http://env.example", "environment")
        assert agent.shards.fetcher.hf_base_url == "http://env.example"
        assert sources["log_level"] == ("warning", "cluster")
        # The status says an environment value hides the cluster's.
        assert any("LLMGW_HUB_URL=http://env.example" in w.text for w in status.warnings)


async def test_rollback_restores_the_previous_version_everywhere_it_applies(tmp_path):
    async with running_cluster(tmp_path) as c, c.admin() as admin:
        await admin.set_settings(["router.admission.bands[0].max_queue=2"])
        back = await admin.rollback_settings(1, author="carol")
        assert back.version.version == 3 and back.version.comment == "back to version 1"
        assert c.server.gateway.bands.config.bands[0].max_queue == 1000
        diff = await admin.settings_diff(1, 3)
        assert list(diff.changes) == []


async def test_after_a_restart_the_store_wins_and_server_yaml_is_ignored_with_one_warning(
    tmp_path, caplog
):
    async with running_cluster(tmp_path) as c, c.admin() as admin:
        await admin.set_settings(["router.admission.bands[0].max_queue=4"])
    caplog.set_level(logging.WARNING, logger="gatewayd.settings")
    async with running_cluster(tmp_path) as c:
        assert c.server.gateway.bands.config.bands[0].max_queue == 4
    warned = [r.getMessage() for r in caplog.records if r.name == "gatewayd.settings"]
    assert len(warned) == 1
    assert "server.yaml's router.admission.bands[0].max_queue are ignored" in warned[0]
