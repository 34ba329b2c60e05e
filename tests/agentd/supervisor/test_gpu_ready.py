"""Ready means serving on its cards: a GPU shard's processes must hold memory on exactly those.

The cards are a recorded inventory's (the fake GPU probe); the engine is
``fake_engine.py``, which says what it holds through the probe's directory
as real engine stand-ins do. Regression: a llama.cpp whose GPU backend did
not load answered on the CPU and was counted a GPU replica.
"""

from __future__ import annotations

from agentd.discovery import FakeGpuProbe
from agentd.discovery.fake import PROCS_ENV
from agentd.supervisor import ShardRecord
from agentd.supervisor.gpu_hold import all_of, any_of, verdict
from tests.agentd.supervisor.conftest import eventually, gone

GIB = 2**30


def gpu_setup(harness, given: str = "0,1"):
    procs = harness.tmp_path / "agent" / "fake-gpu" / "procs"
    probe = FakeGpuProbe.from_fixture("a100_40g_x2_nvlink", procs_dir=procs)
    env = {PROCS_ENV: str(procs), "CUDA_VISIBLE_DEVICES": given}
    sup, events = harness.supervisor(gpu_processes=probe.processes)
    return sup, events, env


def reasons(events) -> list[tuple[str, str]]:
    return [(e.state, e.reason) for e in events]


async def test_a_gpu_shard_that_answers_but_holds_nothing_on_its_cards_fails_as_running_on_cpu(
    harness,
):
    sup, events, env = gpu_setup(harness)
    info = await sup.start(harness.spec(gpu_indexes=(0, 1), env=env, deadline_s=2.0))

    await eventually(lambda: events.states()[-1:] == ["failed"], "never failed", 15)
    (waiting,) = [r for s, r in reasons(events) if "yet" in r]
    assert waiting.endswith("but its processes hold no memory on GPU 0 or 1 yet")
    assert "ready" not in events.states()
    assert events.last().reason.startswith(
        "answers, but runs on the CPU: its processes hold no memory on GPU 0 or 1; it was stopped"
    )
    assert gone(info.pid)


async def test_a_gpu_shard_is_ready_once_its_processes_hold_memory_on_its_cards(harness):
    sup, events, env = gpu_setup(harness)
    loaded = harness.tmp_path / "loaded"
    spec = harness.spec(
        "--hold-gpu", str(GIB), "--hold-when", str(loaded), gpu_indexes=(0, 1), env=env
    )
    await sup.start(spec)

    await eventually(lambda: any("yet" in e.reason for e in events), "never said it waits")
    assert events.states()[-1] == "starting"
    loaded.touch()
    await eventually(lambda: events.states()[-1:] == ["ready"], "never ready")
    assert events.last().reason.endswith("; holds 2.0 GiB on GPU 0 and 1")


async def test_memory_held_by_a_child_of_the_engine_is_the_shards(harness):
    sup, events, env = gpu_setup(harness, given="1")
    await sup.start(
        harness.spec("--hold-gpu", str(GIB), "--hold-in-child", gpu_indexes=(1,), env=env)
    )
    await eventually(lambda: events.states()[-1:] == ["ready"], "never ready")
    assert events.last().reason.endswith("holds 1.0 GiB on GPU 1")


async def test_memory_on_a_card_it_was_not_given_fails_the_shard(harness):
    sup, events, env = gpu_setup(harness, given="0")
    spec = harness.spec("--hold-gpu", str(GIB), "--hold-on", "0,1", gpu_indexes=(0,), env=env)
    info = await sup.start(spec)
    await eventually(lambda: events.states()[-1:] == ["failed"], "never failed")
    assert events.last().reason.startswith(
        "answers, but its processes hold memory on GPU 1, which it was not given "
        "(it was given GPU 0); it was stopped"
    )
    assert gone(info.pid)


async def test_a_shard_holding_some_of_its_cards_at_its_deadline_says_which_are_missing(harness):
    sup, events, env = gpu_setup(harness)
    spec = harness.spec(
        "--hold-gpu", str(GIB), "--hold-on", "0", gpu_indexes=(0, 1), env=env, deadline_s=2.0
    )
    await sup.start(spec)
    await eventually(lambda: events.states()[-1:] == ["failed"], "never failed", 15)
    assert events.last().reason.startswith(
        "answers, but its processes hold memory on GPU 0 but none on GPU 1; it was stopped"
    )


async def test_a_shard_given_no_cards_is_ready_when_it_answers(harness):
    sup, events, _ = gpu_setup(harness)
    await sup.start(harness.spec())
    await eventually(lambda: events.states() == ["starting", "ready"], "never ready")


async def test_an_adopted_gpu_shard_holding_its_cards_is_ready_at_once(harness):
    first, events1, env = gpu_setup(harness)
    info = await first.start(harness.spec("--hold-gpu", str(GIB), gpu_indexes=(0, 1), env=env))
    await eventually(lambda: events1.states()[-1:] == ["ready"], "never ready")
    await first.close()
    record = ShardRecord.model_validate_json((harness.state_dir / "s1.json").read_text())
    assert record.gpu_indexes == [0, 1]

    second, events2, _ = gpu_setup(harness)
    assert await second.adopt_all() == ["s1"]
    assert events2.states() == ["ready"]
    assert events2.last().reason.endswith("holds 2.0 GiB on GPU 0 and 1")
    assert second.running()[0].pid == info.pid


def test_the_verdict_skips_cards_whose_processes_cannot_be_listed():
    assert verdict([0, 1], {0: GIB}, listed=[0]).ready
    hold = verdict([0], {}, listed=[])
    assert hold.ready and "cannot be listed" in hold.words


def test_cards_are_named_as_people_list_them():
    assert (all_of([1]), all_of([1, 0]), any_of([0, 1, 2])) == (
        "GPU 1",
        "GPU 0 and 1",
        "GPU 0, 1 or 2",
    )
