"""The agent's own restart: engines keep running and the next agent adopts them.

Each test plays the restart with two Supervisors on one state directory:
the first is closed (as an agent shutting down), the second adopts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import psutil

from agentd.supervisor import EXITED_WHILE_DOWN, ShardRecord
from tests.agentd.supervisor.conftest import eventually, gone


async def test_a_restarted_agent_adopts_a_running_engine_without_restarting_it(harness):
    # An agent's restart (a settings change, an upgrade) must cost no
    # engine a restart: replicas go on serving, with the same process.
    trigger = harness.tmp_path / "go"
    first, events1 = harness.supervisor()
    info = await first.start(
        harness.spec("--say", "before-restart", "--when", str(trigger), "after-restart")
    )
    await eventually(lambda: events1.states() == ["starting", "ready"], "never ready")
    created = psutil.Process(info.pid).create_time()
    await first.close()

    second, events2 = harness.supervisor()
    assert await second.adopt_all() == ["s1"]
    adopted = second.running()[0]
    assert (adopted.pid, adopted.adopted, adopted.state) == (info.pid, True, "ready")
    assert psutil.Process(info.pid).create_time() == created
    # Ready at once: no "starting" flicker for a replica that was serving.
    assert events2.states() == ["ready"]
    assert events2.last().reason.startswith(f"adopted from a previous agent (pid {info.pid})")
    assert "before-restart" in second.log_tail("s1")

    # Its output after the restart arrives: the file has no reader to lose.
    trigger.touch()
    await eventually(lambda: "after-restart" in second.log_tail("s1"), "no output after adoption")

    await second.stop("s1", grace_s=5)
    assert events2.states() == ["ready", "stopped"]
    assert gone(info.pid)
    assert not (harness.state_dir / "s1.json").exists()


async def test_an_adopted_engine_that_is_still_loading_stays_starting_until_it_answers(harness):
    first, _ = harness.supervisor()
    await first.start(harness.spec("--health-after", "1.5"))
    await first.close()

    second, events2 = harness.supervisor()
    assert await second.adopt_all() == ["s1"]
    assert events2.states() == ["starting"]
    await eventually(lambda: events2.states() == ["starting", "ready"], "never ready")


async def test_an_adopted_engine_that_exits_is_reported_failed(harness):
    trigger = harness.tmp_path / "exit"
    first, _ = harness.supervisor()
    await first.start(harness.spec("--exit-when", str(trigger), "--exit-code", "5"))
    await first.close()
    second, events2 = harness.supervisor()
    assert await second.adopt_all() == ["s1"]

    trigger.touch()
    await eventually(lambda: events2.states()[-1] == "failed", "the exit went unreported")
    # A real restarted agent is not the engine's parent and cannot know its
    # status; this test's process is, so it can.
    assert events2.last().reason.startswith("exited with code 5")
    assert "exiting with 5" in events2.last().reason


async def test_an_engine_that_died_while_the_agent_was_down_is_reported_failed(harness):
    first, events1 = harness.supervisor()
    info = await first.start(harness.spec("--say", "last words before the crash"))
    await eventually(lambda: "ready" in events1.states(), "never ready")
    await first.close()
    os.killpg(info.pgid, signal.SIGKILL)
    await asyncio.to_thread(os.waitpid, info.pid, 0)

    second, events2 = harness.supervisor()
    assert await second.adopt_all() == []
    failed = events2.last()
    assert (failed.state, failed.pid, failed.exit_code) == ("failed", info.pid, None)
    assert failed.reason.startswith(EXITED_WHILE_DOWN)
    assert "last words before the crash" in failed.reason
    assert "last words before the crash" in second.log_tail("s1")
    assert second.running() == []
    assert not (harness.state_dir / "s1.json").exists()
    assert not (harness.output_dir / "shard-s1.log").exists()


async def test_a_state_file_whose_pid_is_now_another_process_is_not_adopted(harness):
    # Pids are reused: after a reboot or a long downtime the recorded pid can
    # be anyone's. Signalling that process as if it were the engine would
    # kill a stranger; the start time tells them apart.
    stranger = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)", start_new_session=True
    )
    harness.track(stranger.pid)
    record = ShardRecord(
        shard_id="s1", replica_id="r-s1", pid=stranger.pid, pgid=stranger.pid,
        start_time=psutil.Process(stranger.pid).create_time() - 100, port=1,
        argv_hash="0" * 64, output_file=str(harness.output_dir / "shard-s1.log"),
        health_url="http://127.0.0.1:1/health", started_at=0, startup_deadline_s=60, user="x",
    )  # fmt: skip
    harness.state_dir.mkdir(parents=True)
    (harness.state_dir / "s1.json").write_text(record.model_dump_json())

    sup, events = harness.supervisor()
    assert await sup.adopt_all() == []
    assert events.last().state == "failed"
    assert (
        events.last().reason == f"{EXITED_WHILE_DOWN} (pid {stranger.pid} is another process now)"
    )
    assert stranger.returncode is None and not gone(stranger.pid), "the stranger was signalled"
    assert not (harness.state_dir / "s1.json").exists()


async def test_an_unreadable_state_file_is_reported_rather_than_ignored(harness):
    harness.state_dir.mkdir(parents=True)
    (harness.state_dir / "s9.json").write_text("{not json")
    sup, events = harness.supervisor()

    assert await sup.adopt_all() == []
    assert events.states("s9") == ["failed"]
    assert events.last("s9").reason.startswith("its state file could not be read")
    # Kept for a look, out of the next agent's way.
    assert (harness.state_dir / "s9.json.unreadable").read_text() == "{not json"
    assert await harness.supervisor()[0].adopt_all() == []


async def test_adopting_twice_adopts_nothing_new(harness):
    first, _ = harness.supervisor()
    await first.start(harness.spec())
    await first.close()
    second, events2 = harness.supervisor()
    assert await second.adopt_all() == ["s1"]
    assert await second.adopt_all() == []
    assert len(events2) == 1
