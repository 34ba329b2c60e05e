"""`llmgw ctl usage` and `llmgw ctl usage export` as an operator types them, against a real gatewayd.

The rows are written the way the gateway writes them: through a UsageWriter
on the running server's store.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta

from gatewayd.gateway.metering.usage import UsageRow, UsageWriter
from llmgw.errors import ExitCode
from tests.cluster_fixture import running_cluster
from tests.e2e.helpers import llmgw


async def _ctl(home, *args: str):
    # In a thread: the control plane answering runs on this test's event loop.
    # Wide enough that rich does not fold the table's cells.
    return await asyncio.to_thread(llmgw, home, *args, timeout_s=60, COLUMNS="200")


def _point_the_cli_at(cluster) -> None:
    """server.yaml names the admin port the in-process server really got (it asked for 0)."""
    yaml = cluster.paths.server_yaml
    port = cluster.server.ports["admin"]
    yaml.write_text(re.sub(r"admin: \S+", f"admin: 127.0.0.1:{port}", yaml.read_text()))


async def test_usage_is_summed_shown_and_exported_from_a_running_gatewayd(tmp_path):
    now = datetime.now(UTC)
    rows = [
        UsageRow(
            at=now - timedelta(hours=2),
            key_id="key_a",
            project="Acme/ml/search",
            model="chat",
            served_model="chat",
            replica="chat-r1",
            prompt_tokens=120,
            cached_tokens=20,
            completion_tokens=30,
            cost_micros=2_500_000,
            latency_ms=400.0,
            ttft_ms=80.0,
        ),
        UsageRow(
            at=now - timedelta(hours=1),
            key_id="key_b",
            project="Acme/web/site",
            model="chat",
            served_model="chat",
            replica="chat-r2",
            prompt_tokens=10,
            latency_ms=12.0,
            status=429,
        ),
        # Three days ago: outside the default period of the last 24 hours.
        UsageRow(at=now - timedelta(days=3), key_id="key_a", project="Acme/ml/search", model="old"),
    ]
    async with running_cluster(tmp_path) as cluster:
        _point_the_cli_at(cluster)
        home = tmp_path / "home"
        writer = UsageWriter(cluster.server.store)
        for r in rows:
            writer.add(r)
        await writer.flush()

        res = await _ctl(home, "ctl", "usage", "--by", "team,status", "--json")
        assert res.returncode == 0, res.stderr
        reply = json.loads(res.stdout)  # the whole of stdout is the reply
        groups = {(g["group"]["team"], g["group"]["status"]): g for g in reply["groups"]}
        assert set(groups) == {("Acme/ml", "200"), ("Acme/web", "429")}
        ml = groups[("Acme/ml", "200")]
        assert (ml["requests"], ml["errors"], ml["prompt_tokens"], ml["cost_micros"]) == (
            1,
            0,
            120,
            2_500_000,
        )
        assert ml["latency_ms_avg"] == 400.0 and ml["ttft_ms_avg"] == 80.0
        assert groups[("Acme/web", "429")]["errors"] == 1
        assert sum(reply["series"]) == 2 and reply["series_step_s"] == 1800
        assert reply["from"] and reply["to"]

        table = await _ctl(home, "ctl", "usage", "--by", "project", "--from", "7d")
        assert table.returncode == 0, table.stderr
        assert "Acme/ml/search" in table.stdout and "2.50" in table.stdout
        assert "llmgw ctl usage export" in table.stdout

        export = await _ctl(home, "ctl", "usage", "export", "--csv")
        assert export.returncode == 0, export.stderr
        lines = list(csv.DictReader(io.StringIO(export.stdout)))
        assert [(r["project"], r["status"]) for r in lines] == [
            ("Acme/ml/search", "200"),
            ("Acme/web/site", "429"),
        ]
        assert lines[0]["ttft_ms"] == "80.0" and lines[1]["ttft_ms"] == ""

        out = tmp_path / "usage.csv"
        to_file = await _ctl(home, "ctl", "usage", "export", "--from", "7d", "--out", str(out))
        assert to_file.returncode == 0, to_file.stderr
        assert "Wrote 3 requests" in to_file.stdout
        assert len(list(csv.DictReader(out.open()))) == 3

        by_model = await _ctl(home, "ctl", "usage", "export", "--from", "7d", "--by", "model")
        assert by_model.returncode == 0, by_model.stderr
        assert by_model.stdout.splitlines()[0].startswith("model,requests,errors")
        assert {line.split(",")[0] for line in by_model.stdout.splitlines()[1:]} == {"chat", "old"}


async def test_bad_groupings_and_dates_are_refused_with_what_to_write(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        _point_the_cli_at(cluster)
        home = tmp_path / "home"

        colour = await _ctl(home, "ctl", "usage", "--by", "colour")
        assert colour.returncode == ExitCode.USAGE
        assert "'colour'" in colour.stderr and "served_model" in colour.stderr
        assert colour.stdout == ""

        bad_date = await _ctl(home, "ctl", "usage", "--from", "yesterday")
        assert bad_date.returncode == ExitCode.USAGE and "2026-09-01" in bad_date.stderr

        backwards = await _ctl(
            home, "ctl", "usage", "--from", "2026-09-02", "--to", "2026-09-01", "--json"
        )
        assert backwards.returncode == ExitCode.USAGE and "backwards" in backwards.stderr

        empty = await _ctl(home, "ctl", "usage")
        assert empty.returncode == 0 and "No requests" in empty.stdout
