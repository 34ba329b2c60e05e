"""`llmgw ctl config …` as an operator types it, against a real in-process gatewayd."""

from __future__ import annotations

import asyncio
import json
import stat
import sys

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app as llmgw_cli
from llmgw.errors import ExitCode
from llmgw.protojson import to_plain
from tests.cluster_fixture import running_cluster
from tests.tui.parity.kit import point_the_cli_at


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        point_the_cli_at(c)
        yield c


async def ctl(cluster, *args: str, env: dict | None = None, input: str | None = None):
    def run():
        return CliRunner().invoke(
            llmgw_cli,
            ["ctl", "config", *args],
            env={"LLMGW_HOME": str(cluster.paths.home), "COLUMNS": "200", **(env or {})},
            input=input,
        )

    return await asyncio.to_thread(run)


def _editor(tmp_path, name: str, body: str) -> str:
    """An $EDITOR that is a script: it changes the file it is given as ``body`` says."""
    script = tmp_path / name
    script.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\np = pathlib.Path(sys.argv[1])\n{body}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


async def test_json_is_exactly_the_admin_reply(cluster):
    got = await ctl(cluster, "get", "router.admission.bands[0]", "--json")
    assert got.exit_code == 0, got.output
    async with cluster.admin() as admin:
        reply = await admin.get_settings("router.admission.bands[0]")
    assert json.loads(got.stdout) == to_plain(reply)
    assert json.loads(json.loads(got.stdout)["value_json"])["max_queue"] == 1000


async def test_set_keeps_a_version_by_the_operator_that_get_history_and_diff_show(cluster):
    done = await ctl(
        cluster, "set", "router.admission.bands[0].max_queue=5", "--comment", "smaller", "--json"
    )
    assert done.exit_code == 0, done.output
    written = json.loads(done.stdout)
    assert written["version"]["version"] == 2 and written["version"]["comment"] == "smaller"
    assert written["in_force"]["version"] == 2
    assert [c["key"] for c in written["changes"]] == ["router.admission.bands[0].max_queue"]

    shown = await ctl(cluster, "get", "router.admission.bands[0].max_queue")
    assert shown.exit_code == 0 and "5" in shown.stdout and "version 2" in shown.stdout
    history = await ctl(cluster, "history")
    assert "smaller" in history.stdout and "server.yaml" in history.stdout
    diff = await ctl(cluster, "diff")
    assert "router.admission.bands[0].max_queue" in diff.stdout and "1000" in diff.stdout


async def test_a_bad_value_is_refused_naming_the_key_and_what_it_expects(cluster):
    refused = await ctl(cluster, "set", "router.admission.bands[0].queue_ttl=0")
    assert refused.exit_code == ExitCode.USAGE, refused.output
    assert "router.admission.bands[0].queue_ttl: must be greater than 0" in refused.stderr


async def test_rollback_restores_the_version_before(cluster):
    await ctl(cluster, "set", "router.admission.bands[0].max_queue=5")
    back = await ctl(cluster, "rollback", "1", "--json")
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout)["version"]["version"] == 3
    value = json.loads(
        (await ctl(cluster, "get", "router.admission.bands[0].max_queue", "--json")).stdout
    )
    assert json.loads(value["value_json"]) == 1000
    assert cluster.server.gateway.bands.config.bands[0].max_queue == 1000


async def test_edit_checks_the_document_and_a_refused_edit_can_be_edited_again(cluster, tmp_path):
    # The first save puts a bad value in; answered "y", the editor opens on that
    # text again and the second save fixes it. What is kept is the fixed one.
    fix = _editor(
        tmp_path,
        "fix.py",
        "t = p.read_text()\n"
        "t = t.replace('max_queue: 1000', 'max_queue: -1') if 'max_queue: 1000' in t"
        " else t.replace('max_queue: -1', 'max_queue: 7')\n"
        "p.write_text(t)",
    )
    edited = await ctl(cluster, "edit", "--json", env={"EDITOR": fix}, input="y\n")
    assert edited.exit_code == 0, edited.output
    assert "router.admission.bands[0].max_queue: must be at least 0" in edited.stderr
    # (CliRunner echoes the typed answer to stdout; a terminal does that itself.)
    reply = json.loads(edited.stdout[edited.stdout.index("{") :])
    assert reply["changes"][0]["new_yaml"] == "7"

    untouched = await ctl(cluster, "edit", env={"EDITOR": _editor(tmp_path, "noop.py", "")})
    assert untouched.exit_code == 0 and "Nothing changed" in untouched.stderr
