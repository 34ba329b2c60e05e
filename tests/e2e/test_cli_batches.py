"""`llmgw ctl batches list|show|cancel` as an operator types them, against real batches.

A real gatewayd with an agent serving sim-chat; clients make the batches the
way they would, with the official ``openai`` SDK (a file of requests, then a
batch over it); the operator's commands run as subprocesses (``llmgw ctl
…``), in a thread, while the control plane answers on this test's loop.
"""

from __future__ import annotations

import asyncio
import json
import re

from openai import AsyncOpenAI

from llmgw.errors import ExitCode
from tests.cluster_fixture import running_cluster, wait_for
from tests.e2e.helpers import llmgw
from tests.tui.test_models_screen import sim_model

PROJECT = "Acme/ml/search"
# Placed nowhere: its requests meet "no replica ready" and wait, so its batch runs until cancelled.
NOWHERE = "nowhere"


async def _ctl(home, *args: str):
    # Wide enough that rich does not fold the table's cells.
    return await asyncio.to_thread(
        llmgw, home, "ctl", "batches", *args, timeout_s=60, COLUMNS="200"
    )


def _point_the_cli_at(cluster) -> None:
    """server.yaml names the admin port the in-process server really got (it asked for 0)."""
    yaml = cluster.paths.server_yaml
    port = cluster.server.ports["admin"]
    yaml.write_text(re.sub(r"admin: \S+", f"admin: 127.0.0.1:{port}", yaml.read_text()))


async def _batch(client: AsyncOpenAI, model: str, n: int) -> str:
    lines = [
        {
            "custom_id": f"q{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"question {i}"}]},
        }
        for i in range(n)
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    f = await client.files.create(file=("requests.jsonl", data), purpose="batch")
    made = await client.batches.create(
        input_file_id=f.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "e2e"},
    )
    return made.id


async def test_an_operator_follows_and_cancels_real_batches_with_ctl_batches(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        _point_the_cli_at(cluster)
        home = cluster.paths.home
        await cluster.start_agent("cpu-node", fixture="cpu_only_16c")
        await cluster.wait_nodes_ready("cpu-node")
        async with cluster.admin() as admin:
            await admin.put_model(sim_model("sim-chat"), create_only=True)
            await admin.put_model(sim_model(NOWHERE, replicas=0), create_only=True)
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT, name="batch-client")

            async def ready() -> bool:
                m = await admin.get_model("sim-chat")
                return m.replicas_ready == 1

            await wait_for(ready, attempts=600)
            base = f"http://127.0.0.1:{cluster.server.ports['http']}/v1"
            client = AsyncOpenAI(base_url=base, api_key=key.secret, max_retries=0)
            done_id = await _batch(client, "sim-chat", 20)
            waiting_id = await _batch(client, NOWHERE, 5)

            async def finished() -> bool:
                return (await admin.get_batch(done_id)).status == "completed"

            await wait_for(finished, attempts=600)

        # list: every batch with its progress; --json is the admin reply, whole.
        table = await _ctl(home, "list")
        assert table.returncode == 0, table.stderr
        done_line = next(line for line in table.stdout.splitlines() if done_id in line)
        assert "completed" in done_line and "20/20 100%" in done_line
        waiting_line = next(line for line in table.stdout.splitlines() if waiting_id in line)
        assert "in_progress" in waiting_line and "0/5 0%" in waiting_line

        listed = await _ctl(home, "list", "--json")
        batches = {b["id"]: b for b in json.loads(listed.stdout)["batches"]}
        assert batches[done_id]["request_counts"] == {"total": 20, "completed": 20, "failed": 0}
        assert batches[done_id]["project"] == PROJECT and batches[done_id]["models"] == ["sim-chat"]
        assert batches[waiting_id]["status"] == "in_progress"

        only = await _ctl(home, "list", "--status", "completed", "--json")
        assert [b["id"] for b in json.loads(only.stdout)["batches"]] == [done_id]

        # show: one batch whole, its output file the one the SDK reads back.
        shown = await _ctl(home, "show", done_id)
        assert shown.returncode == 0, shown.stderr
        assert "20 in all: 20 completed, 0 failed, 0 to go" in shown.stdout
        assert "metadata job" in shown.stdout and "e2e" in shown.stdout
        view = json.loads((await _ctl(home, "show", done_id, "--json")).stdout)
        output = await client.files.content(view["output_file_id"])
        answered = [json.loads(line)["custom_id"] for line in output.text.splitlines()]
        assert sorted(answered) == sorted(f"q{i}" for i in range(20))

        # cancel: a finished batch has nothing to cancel; the waiting one stops.
        refused = await _ctl(home, "cancel", done_id)
        assert refused.returncode == ExitCode.USAGE
        assert f"batch {done_id} has already finished (completed)" in refused.stderr

        cancelled = await _ctl(home, "cancel", waiting_id)
        assert cancelled.returncode == 0, cancelled.stderr
        assert f"llmgw ctl batches show {waiting_id}" in cancelled.stdout

        async def gone_by() -> bool:
            res = await _ctl(home, "show", waiting_id, "--json")
            return json.loads(res.stdout)["status"] == "cancelled"

        await wait_for(gone_by, attempts=100, interval_s=0.2)
        batch = await client.batches.retrieve(waiting_id)
        assert batch.status == "cancelled"

        missing = await _ctl(home, "show", "batch_nope")
        assert missing.returncode == ExitCode.NOT_FOUND
        assert "there is no batch batch_nope" in missing.stderr
        await client.close()
