"""`llmgw ctl mirror …` against a real gatewayd and a real mirror daemon pulling from a hub.

The mirror (``mirrord.daemon.MirrorDaemon`` on loopback, with a peer) pulls
from the fake hub (tests/fakes/hub.py) holding small safetensors
repositories and one with a pickle file; gatewayd lists it in server.yaml
``mirror.urls``. The commands run through Typer's CliRunner in a thread, as
an operator types them. What each command prints against scripted replies:
tests/llmgw/test_ctl_mirror.py.
"""

from __future__ import annotations

import asyncio
import json
import zipfile

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app as llmgw_cli
from llmgw.errors import ExitCode
from tests.cluster_fixture import running_cluster, wait_for
from tests.fakes.tiny_repo import make_tiny_repo
from tests.tui.parity.kit import point_the_cli_at
from tests.tui.parity.mirror import ADDED, HELD, PICKLED, Mirrors


@pytest.fixture
async def cluster(tmp_path):
    async with Mirrors(tmp_path / "mirrors") as mirrors:

        def with_mirror(cfg) -> None:
            cfg.mirror = mirrors.settings()

        async with running_cluster(tmp_path, configure=with_mirror) as c:
            point_the_cli_at(c)
            yield c, mirrors


async def ctl(cluster, *args: str, input: str | None = None):
    def run():
        return CliRunner().invoke(
            llmgw_cli,
            ["ctl", *args],
            env={"LLMGW_HOME": str(cluster.paths.home), "COLUMNS": "200"},
            input=input,
        )

    return await asyncio.to_thread(run)


async def test_an_add_pins_the_commit_and_list_show_and_rm_see_it(cluster):
    c, mirrors = cluster
    commit = mirrors.hub.repos[ADDED].refs["main"]
    res = await ctl(c, "mirror", "add", f"hf:{ADDED}@main", "--json")
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert lines[-1]["pull"]["state"] == "done"
    held = lines[-1]["revision"]
    # main was resolved to the hub's commit, and that is what is held.
    assert (held["repo"], held["commit"], held["refs"]) == (ADDED, commit, ["main"])

    listed = json.loads((await ctl(c, "mirror", "list", "--json")).stdout)
    assert listed["served_by"] == mirrors.url and listed["mirrors"][0]["state"] == "up"
    assert [r["commit"] for r in listed["revisions"] if r["repo"] == ADDED] == [commit]

    shown = await ctl(c, "mirror", "show", ADDED)
    assert shown.exit_code == 0, shown.output
    assert commit[:12] in shown.stdout and "config.json" in shown.stdout

    no = await ctl(c, "mirror", "rm", f"{ADDED}@main", input="n\n")
    assert no.exit_code != 0 and "Nothing removed." in no.stderr
    gone = await ctl(c, "mirror", "rm", f"{ADDED}@main", "--yes")
    assert gone.exit_code == 0, gone.output
    assert f"Removed {ADDED}@{commit[:12]}" in gone.stdout
    missing = await ctl(c, "mirror", "show", ADDED)
    assert missing.exit_code == ExitCode.NOT_FOUND, missing.output


async def test_a_pickle_repository_is_refused_with_how_to_mirror_safetensors(cluster):
    c, _ = cluster
    res = await ctl(c, "mirror", "add", f"hf:{PICKLED}@main")
    assert res.exit_code != 0
    said = " ".join(res.stderr.split())
    assert "pytorch_model.bin" in said and "--include '*.safetensors'" in said, said
    assert "--allow-pickle" in said

    allowed = await ctl(c, "mirror", "add", f"hf:{PICKLED}@main", "--allow-pickle")
    assert allowed.exit_code == 0, allowed.output
    assert f"Held: {PICKLED}@" in allowed.stdout


async def test_status_du_and_peers_show_the_real_mirror(cluster):
    c, mirrors = cluster
    assert (await ctl(c, "mirror", "add", f"hf:{HELD[0]}")).exit_code == 0

    async def status_line() -> str:
        status = await ctl(c, "status")
        return next(x for x in status.stdout.splitlines() if mirrors.url in x)

    # ctl status shows the mirrors as last probed (every probe_interval_s): the next says 1.
    line = await wait_for(lambda: _held_one(status_line()), attempts=100, interval_s=0.2)
    assert line.split()[0] == "mirrors" and " up " in line

    du = json.loads((await ctl(c, "mirror", "du", "--json")).stdout)
    assert du["used_bytes"] > 0 and [r["repo"] for r in du["revisions"]] == [HELD[0]]

    peers = json.loads((await ctl(c, "mirror", "peers", "list", "--json")).stdout)
    b = mirrors.daemons[0].url
    assert [p["url"] for p in peers["peers"]] == [b]
    added = await ctl(c, "mirror", "peers", "add", "http://127.0.0.1:9", "--json")
    assert added.exit_code == 0, added.output
    assert "http://127.0.0.1:9" in [p["url"] for p in json.loads(added.stdout)["peers"]]
    removed = await ctl(c, "mirror", "peers", "rm", "http://127.0.0.1:9")
    assert removed.exit_code == 0, removed.output
    assert "http://127.0.0.1:9" not in removed.stdout


async def _held_one(line) -> str:
    text = await line
    return text if "1 revision" in text else ""


async def test_an_add_past_the_quota_is_refused_naming_what_to_remove(tmp_path):
    # Room for one tiny repository (and a little), not two.
    one = sum(len(data) for data in make_tiny_repo(seed=0).files.values())
    async with Mirrors(tmp_path / "mirrors", max_bytes=one + one // 2) as mirrors:

        def with_mirror(cfg) -> None:
            cfg.mirror = mirrors.settings()

        async with running_cluster(tmp_path, configure=with_mirror) as c:
            point_the_cli_at(c)
            first = await ctl(c, "mirror", "add", f"hf:{HELD[0]}")
            assert first.exit_code == 0, first.output
            second = await ctl(c, "mirror", "add", f"hf:{HELD[1]}")
            assert second.exit_code != 0
            said = " ".join(second.stderr.split())
            assert "quota" in said and f"llmgw ctl mirror rm {HELD[0]}@" in said, said


async def test_a_folder_of_wheels_is_held_one_revision_a_wheel_each_said(cluster, tmp_path):
    # Guards: only the last wheel of a folder said as held (the others' revisions came
    # on progress messages of their own and were dropped).
    c, _ = cluster
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    for name in ("demo_a-1.0-py3-none-any.whl", "demo_b-2.0-py3-none-any.whl"):
        project, version = name.split("-")[:2]
        with zipfile.ZipFile(wheels / name, "w") as z:
            z.writestr(f"{project}/__init__.py", "")
            z.writestr(
                f"{project}-{version}.dist-info/METADATA",
                f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n",
            )
    res = await ctl(c, "mirror", "add", str(wheels), "--wheels")
    assert res.exit_code == 0, res.output
    held = [line for line in res.stdout.splitlines() if line.startswith("Held: ")]
    assert len(held) == 2 and "demo_a-1.0" in held[0] and "demo_b-2.0" in held[1], res.stdout
    listed = json.loads((await ctl(c, "mirror", "list", "--json")).stdout)
    assert sorted(r["repo"] for r in listed["revisions"] if r["kind"] == "wheel") == sorted(
        p.name for p in wheels.iterdir()
    )
