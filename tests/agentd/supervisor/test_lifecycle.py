"""Starting, watching and stopping engines: real processes playing engines."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import time
from pathlib import Path

import psutil
import pytest

from agentd.supervisor import SupervisorError
from llmgw.errors import NotFoundError
from tests.agentd.supervisor.conftest import eventually, gone


async def test_an_engine_is_ready_only_after_its_health_endpoint_answers(harness):
    # A process that runs is not a replica that serves: an engine loading
    # its weights for a minute must not be sent requests meanwhile.
    sup, events = harness.supervisor()
    began = time.monotonic()
    info = await sup.start(harness.spec("--health-after", "1.5"))
    assert info.state == "starting" and info.pid

    await asyncio.sleep(0.8)
    assert events.states() == ["starting"]
    assert [i.state for i in sup.running()] == ["starting"]

    await eventually(lambda: events.states() == ["starting", "ready"], "never became ready")
    assert time.monotonic() - began >= 1.5
    assert sup.running()[0].state == "ready"
    assert events.last().reason.startswith("answers http://127.0.0.1:")


async def test_an_engine_that_never_answers_fails_at_its_deadline_and_is_stopped(harness):
    sup, events = harness.supervisor()
    info = await sup.start(harness.spec("--health-after", "999", deadline_s=1.0))

    await eventually(lambda: events.states() == ["starting", "failed"], "no failure", 15)
    assert "did not answer" in events.last().reason and "it answered 503" in events.last().reason
    assert gone(info.pid)
    assert sup.running() == []


async def test_an_engine_that_exits_is_reported_failed_with_its_code_and_last_lines(harness):
    sup, events = harness.supervisor()
    spec = harness.spec(
        "--say", "loading model", "--say", "error: out of memory",
        "--health-after", "999", "--exit-after", "0.3", "--exit-code", "3",
    )  # fmt: skip
    await sup.start(spec)

    await eventually(lambda: events.states() == ["starting", "failed"], "the exit went unreported")
    failed = events.last()
    assert failed.exit_code == 3
    assert failed.reason.startswith("exited with code 3; last output:")
    assert "error: out of memory" in failed.reason
    assert "loading model" in sup.log_tail("s1", 10)
    # Its files go with it; its lines stay for `llmgw ctl logs`.
    assert not (harness.state_dir / "s1.json").exists()
    assert not (harness.output_dir / "shard-s1.log").exists()
    assert sup.get("s1").state == "failed" and sup.running() == []


async def test_an_engine_killed_by_a_signal_is_reported_in_plain_words(harness):
    sup, events = harness.supervisor()
    info = await sup.start(harness.spec("--health-after", "999"))
    os.kill(info.pid, 9)

    await eventually(lambda: events.states() == ["starting", "failed"], "the kill went unreported")
    assert events.last().exit_code == -9
    assert events.last().reason.startswith("was killed by SIGKILL (signal 9)")


async def test_stop_sends_sigterm_then_sigkill_to_the_whole_group(harness):
    # A worker that outlives its engine holds the GPU memory the next
    # replica needs: the whole group goes, children that ignore SIGTERM too.
    sup, events = harness.supervisor()
    info = await sup.start(harness.spec("--ignore-term", "--child"))
    await eventually(lambda: any("child pid" in line for line in sup.log_tail("s1")), "no child")
    child = int(next(line for line in sup.log_tail("s1") if "child pid" in line).split()[-1])
    assert os.getpgid(child) == info.pgid == info.pid

    began = time.monotonic()
    await sup.stop("s1", grace_s=0.5)
    assert time.monotonic() - began >= 0.5

    assert events.states()[-1] == "stopped"
    assert "did not exit within 0.5 s of SIGTERM and was SIGKILLed" in events.last().reason
    assert events.last().exit_code == -9
    assert gone(info.pid)
    # The group was SIGKILLed; a loaded machine may take a moment to finish
    # the child off (seen once: still running right after stop returned).
    await eventually(lambda: gone(child), "the child outlived the group's SIGKILL")
    assert not (harness.state_dir / "s1.json").exists()


async def test_a_well_behaved_engine_stops_on_sigterm(harness):
    sup, events = harness.supervisor()
    await sup.start(harness.spec())
    await eventually(lambda: "ready" in events.states(), "never ready")

    await sup.stop("s1", grace_s=5)
    assert events.states() == ["starting", "ready", "stopped"]
    assert events.last().reason == "stopped on request: it exited on SIGTERM"
    assert events.last().exit_code == -15
    await sup.stop("s1")  # stopping what is stopped does nothing
    assert events.states() == ["starting", "ready", "stopped"]


async def test_the_output_file_is_private_and_emptied_past_its_cap(harness):
    sup, _ = harness.supervisor(max_output_bytes=8192)
    trigger = harness.tmp_path / "go"
    await sup.start(harness.spec("--flood", "20000", "--when", str(trigger), "after-the-cap"))
    path = harness.output_dir / "shard-s1.log"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    await eventually(
        lambda: "[output file passed 8192 bytes and was emptied]" in sup.log_tail("s1"),
        "the file was never emptied",
    )
    trigger.touch()
    await eventually(lambda: "after-the-cap" in sup.log_tail("s1"), "no output after emptying")
    # O_APPEND: the engine writes at the start of the emptied file, not at
    # its old offset (a sparse file as big as before).
    assert path.stat().st_size < 8192
    assert path.read_text().splitlines()[-1] == "after-the-cap"


async def test_the_key_is_in_the_engines_environment_and_never_on_its_command_line(
    harness, monkeypatch
):
    monkeypatch.setenv("AGENT_ONLY_SECRET", "not-for-engines")
    sup, _ = harness.supervisor()
    spec = harness.spec(env={"LLMGW_ENGINE_KEY": "sk-engine-0123456789"})
    info = await sup.start(spec)

    environ = Path(f"/proc/{info.pid}/environ").read_bytes().split(b"\0")
    assert b"LLMGW_ENGINE_KEY=sk-engine-0123456789" in environ
    assert not any(e.startswith(b"AGENT_ONLY_SECRET=") for e in environ)
    assert b"sk-engine" not in Path(f"/proc/{info.pid}/cmdline").read_bytes()
    assert "sk-engine" not in (harness.state_dir / "s1.json").read_text()
    assert "sk-engine" not in repr(spec)


async def test_the_state_file_holds_what_a_restarted_agent_needs(harness):
    sup, _ = harness.supervisor()
    spec = harness.spec()
    info = await sup.start(spec)
    path = harness.state_dir / "s1.json"
    record = json.loads(path.read_text())

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert record["pid"] == record["pgid"] == info.pid
    assert record["start_time"] == pytest.approx(psutil.Process(info.pid).create_time())
    assert record["port"] == spec.port and record["health_url"] == spec.health_url
    assert record["argv_hash"] == spec.argv_hash and re.fullmatch(r"[0-9a-f]{64}", spec.argv_hash)
    assert record["output_file"] == str(harness.output_dir / "shard-s1.log")
    assert record["replica_id"] == "r-s1" and record["started_at"] > 0


async def test_a_start_that_cannot_exec_is_reported_failed(harness):
    sup, events = harness.supervisor()
    spec = harness.spec().model_copy(update={"argv": ["/nonexistent/llama-server"]})
    info = await sup.start(spec)

    assert info.state == "failed" and info.pid is None
    assert events.states() == ["failed"]
    assert events.last().reason == (
        "could not start /nonexistent/llama-server: No such file or directory"
    )
    assert not (harness.state_dir / "s1.json").exists()


async def test_starting_a_running_shard_again_restarts_nothing(harness):
    # A control plane repeats StartShard after a reconnect; the engine it
    # already has must keep serving.
    sup, events = harness.supervisor()
    spec = harness.spec()
    first = await sup.start(spec)
    again = await sup.start(spec)
    assert again.pid == first.pid and events.states() == ["starting"]

    other = spec.model_copy(update={"argv": [*spec.argv, "--say", "different"]})
    with pytest.raises(SupervisorError, match="already runs another command"):
        await sup.start(other)


async def test_a_shard_that_ended_can_be_started_again(harness):
    sup, events = harness.supervisor()
    spec = harness.spec("--exit-after", "0.1", "--exit-code", "1")
    await sup.start(spec)
    # Whether it answered in its 0.1 s is the machine's speed, not the point:
    # it ended, so it may be started again.
    await eventually(lambda: events.states()[-1:] == ["failed"], "no failure")
    await sup.start(harness.spec())
    assert events.states()[-1] == "starting" and len(sup.running()) == 1


async def test_the_processes_an_engine_started_are_the_shards(harness):
    sup, _ = harness.supervisor()
    info = await sup.start(harness.spec("--child"))
    await eventually(lambda: any("child pid" in line for line in sup.log_tail("s1")), "no child")
    child = int(next(line for line in sup.log_tail("s1") if "child pid" in line).split()[-1])

    owners = await sup.owners([info.pid, child, os.getpid()])
    assert owners == {info.pid: "s1", child: "s1"}


async def test_asking_for_the_log_of_an_unknown_shard_says_so(harness):
    sup, _ = harness.supervisor()
    with pytest.raises(NotFoundError, match="no shard nope on this node"):
        sup.log_tail("nope", 10)


async def test_close_leaves_engines_running_and_close_without_leaving_stops_them(harness):
    sup, _ = harness.supervisor()
    info = await sup.start(harness.spec())
    await sup.close()
    assert not gone(info.pid)
    assert (harness.state_dir / "s1.json").exists()

    sup2, events2 = harness.supervisor()
    assert await sup2.adopt_all() == ["s1"]
    await sup2.close(leave_running=False)
    assert events2.states()[-1] == "stopped"
    await eventually(lambda: gone(info.pid), "the engine outlived close(leave_running=False)")


async def test_an_engine_whose_state_file_cannot_be_written_is_not_left_running(harness):
    # An engine no later agent could find is one nobody could stop.
    harness.state_dir.parent.mkdir(parents=True)
    harness.state_dir.write_text("a file where the directory should be")
    sup, events = harness.supervisor()
    await sup.start(harness.spec())

    assert events.states() == ["failed"]
    assert events.last().reason.startswith("could not write its state file:")
    assert gone(events.last().pid)
