"""`llmgw ctl batches list|show|cancel` as an operator types them, against a real admin server.

The server is the console tests' fake admin (real grpclib, the real token
check) holding batches in a dict; the commands run through Typer's CliRunner
in a thread, as the server answers on this test's event loop. The same
commands against a real gatewayd with real batches: tests/e2e/test_cli_batches.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app as llmgw_cli
from llmgw.errors import ExitCode
from llmgw.paths import Paths
from llmgw.present.batchfmt import check_status, progress_text
from llmgw.setup.cluster_init import init_server
from tests.tui.kit.fake_admin import TOKEN, FakeAdminServer, batch


@pytest.fixture
async def home(tmp_path):
    """An LLMGW_HOME whose server.yaml and admin token name the fake admin server."""
    async with FakeAdminServer() as srv:
        paths = Paths.under(tmp_path / "home")
        init_server(paths, hosts=["localhost"], ports={"admin": srv.port})
        paths.admin_token_file.write_text(TOKEN)
        srv.service.batches = {
            "batch_run": batch("batch_run", total=200, completed=70, failed=3),
            "batch_done": batch(
                "batch_done",
                status="completed",
                total=10,
                completed=10,
                created_at="2026-09-01T12:00:00+00:00",
                endpoint="/v1/embeddings",
                project="Acme/web/site",
            ),
        }
        yield paths.home, srv.service


async def ctl(home, *args: str):
    def run():
        return CliRunner().invoke(
            llmgw_cli, ["ctl", "batches", *args], env={"LLMGW_HOME": str(home), "COLUMNS": "200"}
        )

    return await asyncio.to_thread(run)


async def test_list_prints_each_batch_with_its_progress_and_json_prints_the_reply(home):
    home, service = home
    table = await ctl(home, "list")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert "Batches (2)" in lines[0]
    run = next(line for line in lines if "batch_run" in line)
    assert "in_progress" in run and "73/200 36%" in run and "███" in run
    assert "batch_done" in table.stdout and "10/10 100%" in table.stdout

    as_json = await ctl(home, "list", "--json")
    assert as_json.exit_code == 0, as_json.output
    reply = json.loads(as_json.stdout)  # the whole of stdout is the reply
    assert [b["id"] for b in reply["batches"]] == ["batch_run", "batch_done"]
    assert reply["batches"][0]["request_counts"] == {"total": 200, "completed": 70, "failed": 3}

    only = await ctl(home, "list", "--status", "completed", "--project", "Acme/web/site")
    assert only.exit_code == 0 and "batch_done" in only.stdout and "batch_run" not in only.stdout
    asked = service.batch_requests[-1]
    assert (asked.status, asked.project) == ("completed", "Acme/web/site")


async def test_a_status_that_is_not_one_of_openais_is_refused_with_the_list(home):
    home, service = home
    res = await ctl(home, "list", "--status", "running")
    assert res.exit_code == ExitCode.USAGE
    assert "'running' is not a batch status" in res.stderr and "in_progress" in res.stderr
    assert not service.batch_requests  # refused before gatewayd was asked


async def test_show_prints_one_batch_whole_and_a_missing_one_says_so(home):
    home, _ = home
    res = await ctl(home, "show", "batch_run")
    assert res.exit_code == 0, res.output
    assert "200 in all: 70 completed, 3 failed, 127 to go" in res.stdout
    assert "file-in-batch_run" in res.stdout and "24h" in res.stdout

    as_json = await ctl(home, "show", "batch_run", "--json")
    assert json.loads(as_json.stdout)["status"] == "in_progress"

    missing = await ctl(home, "show", "batch_nope")
    assert missing.exit_code == ExitCode.NOT_FOUND
    assert "there is no batch batch_nope" in missing.stderr
    assert "llmgw ctl batches list" in missing.stderr


async def test_cancel_stops_a_running_batch_and_refuses_a_finished_one_in_plain_words(home):
    home, service = home
    res = await ctl(home, "cancel", "batch_run")
    assert res.exit_code == 0, res.output
    assert "cancelling" in res.stdout and "llmgw ctl batches show batch_run" in res.stdout
    assert service.batches["batch_run"].status == "cancelling"

    done = await ctl(home, "cancel", "batch_done")
    assert done.exit_code == ExitCode.USAGE
    assert "batch batch_done has already finished (completed)" in done.stderr
    assert "nothing to cancel" in done.stderr

    missing = await ctl(home, "cancel", "batch_nope", "--json")
    assert missing.exit_code == ExitCode.NOT_FOUND and missing.stdout == ""
    assert "there is no batch batch_nope" in missing.stderr


def test_progress_reads_answered_of_all_and_only_says_100_when_every_request_is():
    assert str(progress_text(batch("b", total=3, completed=2))) == "██████░░░░ 2/3 66%"
    assert str(progress_text(batch("b", total=1000, completed=999))).endswith(" 999/1,000 99%")
    assert str(progress_text(batch("b", total=0))) == "-"
    assert check_status("In-Progress") == "in_progress" and check_status("") == ""
