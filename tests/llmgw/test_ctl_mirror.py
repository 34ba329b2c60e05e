"""`llmgw ctl mirror …` as an operator types it, against a real admin server.

The server is the console tests' fake admin with the Mirror* RPCs
(tests/tui/kit/fake_mirror.py: real grpclib, the real token check); the commands
run through Typer's CliRunner in a thread while it answers on this test's
event loop. The same commands against a real gatewayd and a real mirror:
tests/tui/parity/test_parity.py (the Mirror screen's declarations).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app as llmgw_cli
from llmgw.errors import ExitCode, UsageError
from llmgw.paths import Paths
from llmgw.present.mirrorfmt import add_request, lag_text, size_text, split_target
from llmgw.setup.cluster_init import init_server
from tests.tui.kit.fake_admin import TOKEN, FakeAdminServer
from tests.tui.kit.fake_mirror import (
    GEMMA,
    GEMMA_COMMIT,
    MIRROR_A,
    MIRROR_B,
    PICKLE_ERROR,
    PULLED_BYTES,
    TINY,
    FakeMirrorService,
)


@pytest.fixture
async def home(tmp_path):
    """An LLMGW_HOME whose server.yaml and admin token name the fake admin server."""
    service = FakeMirrorService()
    async with FakeAdminServer(service=service) as srv:
        paths = Paths.under(tmp_path / "home")
        init_server(paths, hosts=["localhost"], ports={"admin": srv.port})
        paths.admin_token_file.write_text(TOKEN)
        yield paths.home, service


async def ctl(home, *args: str, input: str | None = None, prefix=("ctl", "mirror")):
    def run():
        return CliRunner().invoke(
            llmgw_cli,
            [*prefix, *args],
            env={"LLMGW_HOME": str(home), "COLUMNS": "200"},
            input=input,
        )

    return await asyncio.to_thread(run)


async def test_list_shows_each_mirror_with_its_state_then_what_the_first_up_holds(home):
    home, _ = home
    res = await ctl(home, "list")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "Mirrors (2)" in out
    a = next(line for line in out.splitlines() if MIRROR_A in line and "up" in line)
    assert "1.20 GB" in a and "10.0 GB" in a and "40.0 GB" in a
    b = next(line for line in out.splitlines() if MIRROR_B in line and "down" in line)
    assert "connection refused" in b
    assert f"Held by {MIRROR_A} (2)" in out
    gemma = next(line for line in out.splitlines() if GEMMA in line)
    assert GEMMA_COMMIT[:12] in gemma and GEMMA_COMMIT[:13] not in gemma
    assert "main" in gemma and "253 MB" in gemma and "2026-09-01 12:00:00" in gemma


async def test_list_json_is_the_admin_reply_and_nothing_else(home):
    home, _ = home
    res = await ctl(home, "list", "--json")
    assert res.exit_code == 0, res.output
    reply = json.loads(res.stdout)
    assert [m["state"] for m in reply["mirrors"]] == ["up", "down"]
    assert reply["served_by"] == MIRROR_A
    assert [r["repo"] for r in reply["revisions"]] == [TINY, GEMMA]


async def test_show_lists_a_repositorys_revisions_and_the_files_of_the_newest(home):
    home, _ = home
    res = await ctl(home, "show", GEMMA, "--revision", "main")
    assert res.exit_code == 0, res.output
    assert GEMMA_COMMIT[:12] in res.stdout and "model.safetensors" in res.stdout
    assert "config.json" in res.stdout

    missing = await ctl(home, "show", "nobody/nothing")
    assert missing.exit_code == ExitCode.NOT_FOUND
    assert "llmgw ctl mirror add hf:nobody/nothing" in missing.stderr


async def test_add_follows_the_pull_to_the_end_and_says_what_is_held_and_the_next_step(home):
    home, service = home
    res = await ctl(home, "add", "hf:acme/fresh@main", "--include", "*.gguf")
    assert res.exit_code == 0, res.output
    assert "Held: acme/fresh@" + "e" * 40 in res.stdout
    assert f"llmgw ctl model serve hf:acme/fresh@{'e' * 40}" in res.stdout
    sent = service.adds[-1]
    assert (sent.source, sent.include, sent.allow_pickle) == (
        "hf:acme/fresh@main",
        ["*.gguf"],
        False,
    )


async def test_add_json_prints_one_progress_object_a_line_the_last_with_the_revision(home):
    home, _ = home
    res = await ctl(home, "add", "hf:acme/fresh", "--json")
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [p["pull"]["state"] for p in lines] == ["queued", "fetching", "done"]
    half = lines[1]["pull"]
    assert half["bytes_done"] * 2 == half["bytes_total"] == PULLED_BYTES
    assert half["rate_bytes_s"] > 0 and half["eta_s"] > 0
    assert "revision" not in lines[1] or not lines[1]["revision"]
    assert lines[-1]["revision"]["repo"] == "acme/fresh"


async def test_a_refused_pickle_pull_exits_non_zero_with_how_to_mirror_safetensors(home):
    # Guards: a failed pull printed as the last progress line and exit 0 (scripts went on).
    home, _ = home
    res = await ctl(home, "add", "hf:tiny/pickled")
    assert res.exit_code != 0
    said = " ".join(res.stderr.split())
    assert "failed" in said and "--include '*.safetensors'" in said and "--allow-pickle" in said
    as_json = await ctl(home, "add", "hf:tiny/pickled", "--json")
    assert as_json.exit_code != 0
    assert json.loads(as_json.stdout.splitlines()[-1])["pull"]["error"] == PICKLE_ERROR


async def test_an_add_over_the_quota_is_refused_naming_what_to_remove(home):
    home, _ = home
    res = await ctl(home, "add", "hf:big/quota-buster")
    assert res.exit_code == ExitCode.USAGE
    said = " ".join(res.stderr.split())
    assert "quota" in said and "remove google/gemma-3-270m-gguf@aaaaaaaaaaaa" in said


async def test_add_detach_returns_once_the_mirror_took_it(home):
    home, service = home
    res = await ctl(home, "add", "hf:acme/later", "--detach")
    assert res.exit_code == 0, res.output
    assert "queued" in res.stdout and "llmgw ctl mirror list" in res.stdout
    assert service.adds[-1].detach and service.pulls[-1].state == "queued"


async def test_a_local_folder_is_sent_as_an_absolute_path_with_its_name(
    home, tmp_path, monkeypatch
):
    home, service = home
    (tmp_path / "weights").mkdir()
    monkeypatch.chdir(tmp_path)
    res = await ctl(home, "add", "weights", "--as", "local/weights")
    assert res.exit_code == 0, res.output
    assert service.adds[-1].source == str(tmp_path / "weights")
    assert service.adds[-1].as_repo == "local/weights"


async def test_rm_asks_first_and_removes_nothing_when_told_no(home):
    home, service = home
    res = await ctl(home, "rm", f"{GEMMA}@main", input="n\n")
    assert res.exit_code != 0
    assert f"Remove {GEMMA}@{GEMMA_COMMIT[:12]} (253 MB)" in res.stderr
    assert "Nothing removed." in res.stderr
    assert not service.removes and any(r.repo == GEMMA for r in service.revisions)

    yes = await ctl(home, "rm", f"{GEMMA}@main", input="y\n")
    assert yes.exit_code == 0, yes.output
    assert "Removed" in yes.stdout and "253 MB freed" in yes.stdout
    assert not any(r.repo == GEMMA for r in service.revisions)


async def test_rm_yes_json_removes_without_asking_and_prints_the_reply(home):
    home, service = home
    res = await ctl(home, "rm", TINY, "--yes", "--json")
    assert res.exit_code == 0, res.output
    reply = json.loads(res.stdout)
    assert [r["repo"] for r in reply["removed"]] == [TINY]
    assert (service.removes[-1].repo, service.removes[-1].revision) == (TINY, "")


async def test_du_says_used_quota_room_free_and_unreferenced_then_the_largest(home):
    home, _ = home
    res = await ctl(home, "du")
    assert res.exit_code == 0, res.output
    out = res.stdout
    for words in ("1.20 GB", "10.0 GB", "8.80 GB", "40.0 GB", "12.0 MB", "Largest revisions"):
        assert words in out, words
    assert out.index(TINY) < out.index(GEMMA)  # largest first


async def test_peers_list_shows_state_and_lag_and_add_and_rm_change_them(home):
    home, service = home
    res = await ctl(home, "peers", "list")
    assert res.exit_code == 0, res.output
    row = next(line for line in res.stdout.splitlines() if MIRROR_B in line)
    assert "behind" in row and "1m 35s" in row and "2" in row

    added = await ctl(home, "peers", "add", "http://127.0.0.1:7082", "--json")
    assert added.exit_code == 0, added.output
    assert [p["url"] for p in json.loads(added.stdout)["peers"]][-1] == "http://127.0.0.1:7082"
    gone = await ctl(home, "peers", "rm", MIRROR_B)
    assert gone.exit_code == 0, gone.output
    assert [p.url for p in service.peers] == ["http://127.0.0.1:7082"]


async def test_ctl_status_shows_each_mirror_with_its_state(home):
    home, _ = home
    res = await ctl(home, "status", prefix=("ctl",))
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    a = next(line for line in lines if MIRROR_A in line)
    assert a.split()[0] == "mirrors" and "up" in a and "1.20 GB used of 10.0 GB" in a
    b = next(line for line in lines if MIRROR_B in line)
    assert "down: connection refused" in b


async def test_no_mirror_up_is_said_in_plain_words(home):
    home, service = home
    service.mirrors[0].state, service.mirrors[0].reason = "down", "timed out"
    res = await ctl(home, "du")
    assert res.exit_code == ExitCode.UNREACHABLE
    assert "no mirror is up" in res.stderr and "timed out" in res.stderr


# -- what the options make ----------------------------------------------------------------


def test_an_engine_add_needs_its_pinned_sha256():
    with pytest.raises(UsageError, match="sha256"):
        add_request("https://example.invalid/llama.zip", engine=True)
    req = add_request("https://example.invalid/llama.zip", engine=True, sha256="A" * 64)
    assert (req.kind, req.sha256) == ("engine", "a" * 64)


def test_a_url_without_engine_and_a_local_path_without_a_name_are_refused(tmp_path):
    with pytest.raises(UsageError, match="engine"):
        add_request("https://example.invalid/x.zip")
    with pytest.raises(UsageError, match="say which org/name"):
        add_request(str(tmp_path))
    with pytest.raises(UsageError, match="does not exist"):
        add_request(str(tmp_path / "missing"), as_repo="a/b")
    with pytest.raises(UsageError, match="hf:org/name"):
        add_request("hf:justname")
    assert add_request(str(tmp_path), wheels=True).kind == "wheel"


def test_rm_targets_and_figures_read_as_people_write_them():
    assert split_target("org/name@main") == ("org/name", "main")
    assert split_target("org/name") == ("org/name", "")
    with pytest.raises(UsageError):
        split_target("org/name@")
    assert [size_text(n) for n in (253_000_000, 1_200_000_000, 0, 512)] == [
        "253 MB",
        "1.20 GB",
        "0 B",
        "512 B",
    ]
    assert lag_text(-1) == "never" and lag_text(0.2) == "< 1 s" and lag_text(95) == "1m 35s"
