"""``llmgw ctl org|team|project`` and ``keys rotate|limits``, run as a user would."""

from __future__ import annotations

import json

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from openai import AsyncOpenAI, NotFoundError

from llmgw.errors import ExitCode
from tests.cluster_fixture import running_cluster, wait_for
from tests.e2e.helpers import llmgw
from tests.e2e.test_cli import server  # noqa: F401  (the fixture)
from tests.tui.test_models_screen import sim_model


def said(res) -> str:
    """stderr as one line (the terminal wraps long messages)."""
    return " ".join(res.stderr.split())


def ok(home, *args) -> dict:
    res = llmgw(home, "ctl", *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_the_tree_is_made_renamed_and_emptied_from_the_cli(server):  # noqa: F811
    home = server
    assert ok(home, "org", "create", "Acme")["path"] == "Acme"
    ok(home, "team", "create", "Acme/ml")
    project = ok(home, "project", "create", "Acme/ml/search")
    assert (project["kind"], project["keys"]) == ("project", 0)

    res = llmgw(home, "ctl", "project", "create", "Other/x/y")
    assert res.returncode == ExitCode.NOT_FOUND
    assert "no organization 'Other'" in said(res) and "--parents" in said(res)
    res = llmgw(home, "ctl", "org", "create", "Acme")
    assert res.returncode == ExitCode.CONFLICT and "already exists" in said(res)
    res = llmgw(home, "ctl", "team", "create", "Acme")
    assert res.returncode == ExitCode.USAGE and "ORG/TEAM" in said(res)

    key = ok(home, "keys", "create", "--project", "Acme/ml/search", "--rpm", "5", "--budget", "0.5")
    assert key["secret"] and key["limits"]["rpm"] and key["limits"]["budget_month_micros"]
    assert int(key["limits"]["budget_month_micros"]) == 500_000

    # Only the fields given change; --replace writes the whole row.
    limits = ok(home, "keys", "limits", key["key_id"], "--tpm", "1000")
    assert (limits["rpm"], limits["tpm"]) == (5, 1000)
    limits = ok(home, "keys", "limits", key["key_id"], "--clear", "budget")
    assert limits["budget_month_micros"] is None and limits["rpm"] == 5
    limits = ok(home, "keys", "limits", key["key_id"], "--replace", "--tpm", "10")
    assert limits["rpm"] is None and limits["tpm"] == 10
    team = ok(home, "keys", "limits", "Acme/ml", "--rpm", "100", "--budget-day", "2")
    assert (team["rpm"], team["budget_day_micros"]) == (100, 2_000_000)
    res = llmgw(home, "ctl", "keys", "limits", "Acme/nope", "--rpm", "1")
    assert res.returncode == ExitCode.NOT_FOUND

    new = ok(home, "keys", "rotate", key["key_id"], "--overlap", "1h")
    assert new["secret"] and new["secret"] != key["secret"]
    assert new["rotated_from"] == key["key_id"]
    listed = {k["key_id"]: k for k in ok(home, "keys", "list")["keys"]}
    assert listed[key["key_id"]]["kind"] == "rotated" and listed[key["key_id"]]["expires_at"]
    assert listed[new["key_id"]]["kind"] == "service"
    assert all(k["secret"] == "" for k in listed.values())

    ok(home, "team", "rename", "Acme/ml", "research")
    projects = [t["path"] for t in ok(home, "project", "list")["tenants"]]
    assert projects == ["Acme/research/search"]
    assert {k["project"] for k in ok(home, "keys", "list")["keys"]} == {"Acme/research/search"}

    res = llmgw(home, "ctl", "project", "rm", "Acme/research/search")
    assert res.returncode == ExitCode.CONFLICT and "revoke them first" in said(res)
    for key_id in listed:
        ok(home, "keys", "revoke", key_id)
    res = llmgw(home, "ctl", "team", "rm", "Acme/research")
    assert res.returncode == ExitCode.CONFLICT and "remove it first" in said(res)
    ok(home, "project", "rm", "Acme/research/search")
    human = llmgw(home, "ctl", "org", "list")
    assert human.returncode == 0 and "Acme" in human.stdout


# ---- tenants by id: what a project holds moves with a rename and goes with a forced rm ----

PROJECT = "acme/ml/search"


async def _ctl_ok(cluster, *args: str) -> dict:
    code, out, err = await cluster.ctl(*args, "--json")
    assert code == 0, err
    return json.loads(out)


async def _mcp_tools(cluster, secret: str) -> list[str]:
    """The tools a key's agent sees at /mcp (the official SDK client)."""
    endpoint = f"http://127.0.0.1:{cluster.server.ports['http']}/mcp"
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    async with http, Client(streamable_http_client(endpoint, http_client=http)) as c:
        return [t.name for t in (await c.list_tools()).tools]


async def _usage_projects(cluster) -> set[str]:
    reply = await _ctl_ok(cluster, "usage", "--by", "project", "--from", "1d")
    return {g["group"]["project"] for g in reply.get("groups", [])}


async def test_a_renamed_team_keeps_its_projects_files_batches_responses_grants_and_usage(
    tmp_path,
):
    # Guards: a rename moved only tenants and keys, so the key's files, batches,
    # stored responses, MCP grants and usage stayed under acme/ml, out of its reach;
    # and an rm left them there for a project made again with the same name to read.
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("cpu-node", fixture="cpu_only_16c")
        await cluster.wait_nodes_ready("cpu-node")
        async with cluster.admin() as admin:
            await admin.put_model(sim_model("sim-chat"), create_only=True)

            async def ready() -> bool:
                return (await admin.get_model("sim-chat")).replicas_ready == 1

            await wait_for(ready, attempts=600)
        await _ctl_ok(cluster, "project", "create", "--parents", PROJECT)
        await _ctl_ok(cluster, "project", "retention", PROJECT, "1h")
        key = await _ctl_ok(cluster, "keys", "create", "--project", PROJECT, "--name", "svc")
        await _ctl_ok(cluster, "mcp", "grant", PROJECT, "llmgw:admin")
        base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
        client = AsyncOpenAI(base_url=base, api_key=key["secret"], max_retries=0)
        line = {
            "custom_id": "q0",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]},
        }
        upload = await client.files.create(
            file=("requests.jsonl", (json.dumps(line) + "\n").encode()), purpose="batch"
        )
        batch = await client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        kept = await client.responses.create(model="sim-chat", input="hello", store=True)

        async def finished() -> bool:
            return (await client.batches.retrieve(batch.id)).status == "completed"

        await wait_for(finished, attempts=600)
        assert await _mcp_tools(cluster, key["secret"])  # llmgw:admin's, granted

        async def metered() -> bool:  # usage is written about once a second
            return PROJECT in await _usage_projects(cluster)

        await wait_for(metered, attempts=50, interval_s=0.2)

        await _ctl_ok(cluster, "team", "rename", "acme/ml", "ai")

        moved = "acme/ai/search"
        files = {f.id: f.purpose for f in (await client.files.list()).data}
        assert upload.id in files and "batch_output" in files.values()
        assert [b.id for b in (await client.batches.list()).data] == [batch.id]
        assert (await client.responses.retrieve(kept.id)).id == kept.id
        assert await _mcp_tools(cluster, key["secret"])  # llmgw:admin's, granted
        scopes = {g["scope"] for g in (await _ctl_ok(cluster, "mcp", "grants"))["grants"]}
        assert scopes == {f"project:{moved}"}
        listed = await _ctl_ok(cluster, "batches", "list", "--project", moved)
        assert [b["id"] for b in listed["batches"]] == [batch.id]
        projects = await _usage_projects(cluster)
        assert moved in projects and PROJECT not in projects

        # Refused while it holds anything, naming what.
        code, _, err = await cluster.ctl("project", "rm", moved)
        assert code == ExitCode.CONFLICT
        words = " ".join(err.split())
        assert "1 API key" in words and "svc" in words
        assert "file" in words and "requests.jsonl" in words and "--force" in words

        await _ctl_ok(cluster, "project", "rm", moved, "--force")
        assert moved in await _usage_projects(cluster)  # history kept, under its last path

        # The same name again is a new project: nothing of the old one reaches it.
        await _ctl_ok(cluster, "project", "create", moved)
        await _ctl_ok(cluster, "project", "retention", moved, "1h")
        again = await _ctl_ok(cluster, "keys", "create", "--project", moved)
        fresh = AsyncOpenAI(base_url=base, api_key=again["secret"], max_retries=0)
        assert (await fresh.files.list()).data == []
        assert (await fresh.batches.list()).data == []
        with pytest.raises(NotFoundError):
            await fresh.responses.retrieve(kept.id)
        assert await _mcp_tools(cluster, again["secret"]) == []
        assert (await _ctl_ok(cluster, "mcp", "grants"))["grants"] == []
        await client.close()
        await fresh.close()
