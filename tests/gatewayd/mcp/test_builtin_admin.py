"""llmgw:admin's tools against a real control plane, agents and engines.

The tools call the AdminService in-process; each answer's structured content
must be what ``llmgw ctl … --json`` prints for the same admin call.
"""

from __future__ import annotations

import asyncio
import json

import mcp_types
import pytest
from typer.testing import CliRunner

from gatewayd.mcp.builtin_admin import AdminTools
from llmgw.cli.main import app as llmgw_cli
from llmgw.protojson import to_plain
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import Cluster, running_cluster, wait_for
from tests.tui.parity.kit import point_the_cli_at


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        point_the_cli_at(c)
        yield c


def tools_of(cluster: Cluster) -> AdminTools:
    """The gateway's own llmgw:admin, bound to its AdminService as gatewayd starts it."""
    assert cluster.server.mcp is not None
    return cluster.server.mcp.admin_tools


async def ctl_json(cluster: Cluster, *args: str) -> dict:
    def run():
        return CliRunner().invoke(
            llmgw_cli,
            ["ctl", *args, "--json"],
            env={"LLMGW_HOME": str(cluster.paths.home), "COLUMNS": "200"},
        )

    res = await asyncio.to_thread(run)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def sim_model(name: str = "sim-chat") -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        profiles=[ModelProfile(name="default", engine="sim", startup_timeout_s=60)],
        replicas_min=1,
        replicas_max=1,
        slots=1,
    )


def refusal_text(result: dict) -> str:
    assert result["isError"] is True, result
    assert "structuredContent" not in result
    return result["content"][0]["text"]


async def test_every_tool_is_listed_read_only_with_a_schema_the_sdk_takes(cluster):
    tools = tools_of(cluster).tools()
    assert [t["name"] for t in tools] == [
        "cluster_status",
        "list_nodes",
        "list_models",
        "list_replicas",
        "explain_placement",
        "node_logs",
    ]
    for t in tools:
        mcp_types.Tool.model_validate(t)
        assert t["annotations"]["readOnlyHint"] is True
        assert t["inputSchema"]["additionalProperties"] is False
    by_name = {t["name"]: t for t in tools}
    assert by_name["explain_placement"]["inputSchema"]["required"] == ["model"]
    assert by_name["node_logs"]["inputSchema"]["required"] == ["node"]


async def test_list_nodes_is_what_ctl_nodes_json_prints(cluster):
    await cluster.start_agent("cpu-a", fixture="cpu_only_16c")
    await cluster.start_agent("cpu-b", fixture="cpu_only_16c")
    await cluster.wait_nodes_ready("cpu-a", "cpu-b")
    tools = tools_of(cluster)

    async def same_heartbeat():
        # Heartbeats move a node's samples and sequence between two reads:
        # compare a pair read between the same two heartbeats.
        printed = await ctl_json(cluster, "nodes")
        result = await tools.call("list_nodes", {})
        return result if result["structuredContent"] == printed else None

    result = await wait_for(same_heartbeat, attempts=50)
    mcp_types.CallToolResult.model_validate(result)
    assert result["isError"] is False
    nodes = result["structuredContent"]["nodes"]
    assert sorted(n["node_id"] for n in nodes) == ["cpu-a", "cpu-b"]
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


async def test_status_models_replicas_and_placement_answer_the_admin_replies(cluster):
    await cluster.start_agent("cpu-a", fixture="cpu_only_16c")
    await cluster.wait_nodes_ready("cpu-a")
    async with cluster.admin() as admin:
        await admin.put_model(sim_model(), create_only=True)
    tools = tools_of(cluster)

    status = (await tools.call("cluster_status", {}))["structuredContent"]
    assert status["nodes_ready"] == 1 and status["gateway_url"].endswith("/v1")
    assert status.keys() == (await ctl_json(cluster, "status")).keys()

    models = (await tools.call("list_models", {}))["structuredContent"]
    assert [m["spec"]["name"] for m in models["models"]] == ["sim-chat"]

    replicas = (await tools.call("list_replicas", {"model": "sim-chat"}))["structuredContent"]
    assert [r["model"] for r in replicas["replicas"]] == ["sim-chat"]
    none = (await tools.call("list_replicas", {"model": "other"}))["structuredContent"]
    assert none == {"replicas": []}

    placement = await tools.call("explain_placement", {"model": "sim-chat"})
    assert placement["isError"] is False
    async with cluster.admin() as admin:
        expected = to_plain(await admin.explain_placement("sim-chat"))
    assert placement["structuredContent"] == expected
    assert placement["structuredContent"]["model"] == "sim-chat"


async def test_bad_arguments_and_unknown_things_are_error_results_in_words(cluster):
    tools = tools_of(cluster)
    assert "give 'model'" in refusal_text(await tools.call("explain_placement", {}))
    assert "must be a string" in refusal_text(await tools.call("explain_placement", {"model": 5}))
    assert "no model named 'nope'" in refusal_text(
        await tools.call("explain_placement", {"model": "nope"})
    )
    assert "takes no arguments; not 'x'" in refusal_text(await tools.call("list_nodes", {"x": 1}))
    assert "no node named 'ghost'" in refusal_text(await tools.call("node_logs", {"node": "ghost"}))
    assert "from 1 to 500" in refusal_text(
        await tools.call("node_logs", {"node": "ghost", "lines": 0})
    )
    assert "whole number" in refusal_text(
        await tools.call("node_logs", {"node": "ghost", "lines": True})
    )
    assert "must be an object" in refusal_text(await tools.call("list_models", ["x"]))
    unknown = refusal_text(await tools.call("drop_tables", {}))
    assert "no tool 'drop_tables'" in unknown and "list_nodes" in unknown


async def test_node_logs_carries_the_lines_each_engine_on_the_node_wrote(cluster):
    await cluster.start_agent("cpu-a", fixture="cpu_only_16c")
    async with cluster.admin() as admin:
        await admin.put_model(sim_model())

    async def ready():
        async with cluster.admin() as admin:
            rs = (await admin.list_replicas("sim-chat")).replicas
        return next((r for r in rs if r.state == "ready"), None)

    replica = await wait_for(ready, attempts=400)
    tools = tools_of(cluster)

    async def logged():
        result = await tools.call("node_logs", {"node": "cpu-a", "lines": 20})
        entries = result["structuredContent"]["replicas"]
        lines = [line for e in entries for line in e["lines"]]
        return result if any("serving sim-chat" in line for line in lines) else None

    result = await wait_for(logged, attempts=100)
    body = result["structuredContent"]
    assert body["node_id"] == "cpu-a"
    (entry,) = body["replicas"]
    assert entry["replica_id"] == replica.replica_id and entry["error"] == ""
    assert len(entry["lines"]) <= 20
