"""Pulls in the background: started at once, one per source, followed, listed, measured."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from llmgw.mirror.wire import PullRequest
from mirrord.pull import PullJob, PullJobs
from mirrord.pull.errors import PullInvalid
from mirrord.pull.progress import RateWindow
from mirrord.pull.puller import Puller
from mirrord.store import MirrorStore
from tests.fakes.hub import FakeHub


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


@pytest.fixture
async def jobs(tmp_path: Path, hub):
    store = MirrorStore(tmp_path / "mirror")
    puller = Puller(store, upstream=hub.url, backoff_s=0)
    j = PullJobs(store, puller)
    yield j
    await j.close()
    await puller.aclose()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_pull_starts_at_once_and_is_done_with_what_it_holds(hub, jobs):
    commit = hub.add_repo("org/tiny", {"config.json": b"{}", "m.gguf": b"m" * 5000})
    started = jobs.start(PullRequest(source="hf:org/tiny"))
    assert started.state == "queued" and started.source == "hf:org/tiny"
    done = await jobs.wait(started.pull_id)
    assert done.state == "done" and done.error is None
    assert done.revision.commit == commit and done.revision.files is None
    assert (done.files_done, done.files_total) == (2, 2)
    assert done.bytes_done == done.bytes_total == 5002
    assert done.finished_unix >= done.started_unix > 0


async def test_the_same_source_asked_again_while_it_is_pulled_is_the_same_pull(hub, jobs):
    # Guards: two pulls of one thing wrote the same partial files at once.
    hub.add_repo("org/tiny", {"config.json": b"{}"})
    a = jobs.start(PullRequest(source="hf:org/tiny"))
    b = jobs.start(PullRequest(source="hf:org/tiny"))
    c = jobs.start(PullRequest(source="hf:org/tiny", include=["*.gguf"]))
    assert a.pull_id == b.pull_id != c.pull_id
    await jobs.wait(a.pull_id)
    await jobs.wait(c.pull_id)
    # Finished, the same add is a new pull.
    d = jobs.start(PullRequest(source="hf:org/tiny"))
    assert d.pull_id != a.pull_id
    assert (await jobs.wait(d.pull_id)).state == "done"


async def test_following_a_pull_sees_its_states_in_order_and_ends_done(hub, jobs):
    hub.add_repo("org/tiny", {"config.json": b"{}", "m.gguf": b"m" * 200_000})
    started = jobs.start(PullRequest(source="hf:org/tiny"))
    seen = [p async for p in jobs.follow(started.pull_id)]
    states = [p.state for p in seen]
    order = ["queued", "resolving", "fetching", "done"]
    assert states[-1] == "done" and "fetching" in states
    assert [order.index(s) for s in states] == sorted(order.index(s) for s in states)
    bytes_seen = [p.bytes_done for p in seen]
    assert bytes_seen == sorted(bytes_seen)


async def test_a_failed_pull_ends_failed_with_the_error_code_message_and_hint(hub, jobs):
    hub.add_repo("org/old", {"pytorch_model.bin": b"p" * 100})
    started = jobs.start(PullRequest(source="hf:org/old"))
    last = [p async for p in jobs.follow(started.pull_id)][-1]
    assert last.state == "failed" and last.error.code == "refused"
    assert "pytorch_model.bin" in last.error.message and "--include" in last.error.hint
    missing = jobs.start(PullRequest(source="hf:org/missing"))
    failed = await jobs.wait(missing.pull_id)
    assert failed.error.code == "not_found" and "org/missing" in failed.error.message


async def test_a_source_that_cannot_be_pulled_is_refused_before_any_pull_starts(jobs):
    with pytest.raises(PullInvalid):
        jobs.start(PullRequest(source="hf:org/../etc"))
    with pytest.raises(PullInvalid):
        jobs.start(PullRequest(source="https://example.org/x.tar.gz", kind="engine"))
    assert jobs.list() == []


async def test_finished_pulls_are_listed_the_newest_first_and_only_the_last_ones_kept(
    hub, tmp_path
):
    store = MirrorStore(tmp_path / "m")
    puller = Puller(store, upstream=hub.url, backoff_s=0)
    jobs = PullJobs(store, puller, keep=2)
    for i in range(3):
        hub.add_repo(f"org/m{i}", {"config.json": b"{}"})
        await jobs.wait(jobs.start(PullRequest(source=f"hf:org/m{i}")).pull_id)
    await puller.aclose()
    assert [p.source for p in jobs.list()] == ["hf:org/m2", "hf:org/m1"]


async def test_a_done_pull_is_told_to_whoever_syncs_the_peers(hub, tmp_path):
    store = MirrorStore(tmp_path / "m")
    puller = Puller(store, upstream=hub.url, backoff_s=0)
    told = []
    jobs = PullJobs(store, puller, on_done=told.append)
    hub.add_repo("org/tiny", {"config.json": b"{}"})
    await jobs.wait(jobs.start(PullRequest(source="hf:org/tiny")).pull_id)
    await puller.aclose()
    assert [r.repo for r in told] == ["org/tiny"]


class GatedPuller:
    """A puller that holds its pull, bytes half done, until let go: a stalled download."""

    def __init__(self, store) -> None:
        self.store = store
        self.go = asyncio.Event()

    async def pull(self, req, job):
        job.update(state="fetching", repo="org/slow", bytes_total=1000, file="m.gguf")
        job.add_bytes(500)
        await self.go.wait()
        raise PullInvalid("let go")


async def test_a_follower_hears_every_half_second_while_nothing_changes(tmp_path):
    store = MirrorStore(tmp_path / "m")
    puller = GatedPuller(store)
    jobs = PullJobs(store, puller)
    started = jobs.start(PullRequest(source="hf:org/slow"))
    seen = []
    async for p in jobs.follow(started.pull_id):
        seen.append(p)
        if len(seen) == 4:
            puller.go.set()
    assert [p.state for p in seen[1:4]] == ["fetching"] * 3
    assert seen[-1].state == "failed"
    assert seen[2].bytes_done == 500


async def test_stopping_the_mirror_fails_its_running_pulls_saying_they_resume(tmp_path):
    store = MirrorStore(tmp_path / "m")
    jobs = PullJobs(store, GatedPuller(store))
    started = jobs.start(PullRequest(source="hf:org/slow"))
    await asyncio.sleep(0)  # the pull's task begins
    await jobs.close()
    pull = jobs.get(started.pull_id)
    assert pull.state == "failed" and "resumes" in pull.error.hint


def test_the_rate_is_measured_over_the_last_seconds_and_falls_when_bytes_stop():
    clock = Clock()
    rate = RateWindow(3.0, clock)
    rate.add(0)
    for _ in range(10):
        clock.now += 1
        rate.add(int((clock.now - 100) * 1000))
    assert rate.rate() == pytest.approx(1000)
    clock.now += 1.5  # nothing came for 1.5 s: measured from the last sample 3 s back or more
    assert rate.rate() == pytest.approx(2000 / 3.5)
    clock.now += 10
    assert rate.rate() == 0.0


def test_the_time_left_is_the_bytes_left_at_the_rate_and_unknown_without_one():
    clock = Clock()
    job = PullJob("p", "hf:org/x", clock=clock)
    job.update(state="fetching", bytes_total=10_000)
    assert job.snapshot().eta_s == 0.0  # no rate yet: unknown
    job.add_bytes(0)
    clock.now += 2
    job.add_bytes(2000)
    s = job.snapshot()
    assert s.rate_bytes_s == pytest.approx(1000) and s.eta_s == pytest.approx(8)
    job.update(state="done")
    assert job.snapshot().eta_s == 0.0 and job.snapshot().rate_bytes_s == 0.0
