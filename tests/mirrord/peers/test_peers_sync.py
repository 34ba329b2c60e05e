"""Two real mirror daemons on loopback peered both ways: additions and removals carried, neither leading."""

from __future__ import annotations

import os
import secrets

import pytest

from tests.mirrord.peer_helpers import Link, PeerMirror

REPO = "org/tiny"


def files(seed: bytes, size: int = 300_000) -> dict[str, bytes]:
    return {"config.json": b'{"seed": "%s"}' % seed, "model.gguf": os.urandom(size)}


@pytest.fixture
async def pair(tmp_path):
    """A and B, each reading the other through a Link (cut it for a partition)."""
    token = secrets.token_urlsafe(16)
    a = await PeerMirror(tmp_path / "a", token).start()
    b = await PeerMirror(tmp_path / "b", token).start()
    a.link = await Link(b.port).start()
    b.link = await Link(a.port).start()
    await a.add_peer(a.link.url)
    await b.add_peer(b.link.url)
    yield a, b
    for m in (a, b):
        await m.stop()
        await m.link.close()


async def test_an_add_on_one_mirror_appears_on_its_peer_with_its_time_refs_and_bytes(pair):
    a, b = pair
    content = {**files(b"1"), "empty.txt": b""}
    rev = await a.add(REPO, content)
    # No sync called here: A tells B of its change, and B's loop takes it.
    await b.until(lambda: (REPO, rev.commit) in b.held())
    copy = b.store.get("model", REPO, rev.commit)
    assert copy.added_unix == rev.added_unix and copy.refs == ["main"]
    for f in copy.files:
        assert b.store.blob_path(f.sha256).read_bytes() == content[f.path]
    await b.until(lambda: b.peers.peers()[0].state == "in_step")
    [peer] = await b.peer_list()
    assert (peer.url, peer.state, peer.behind, peer.reason) == (b.link.url, "in_step", 0, "")
    assert 0 <= peer.lag_s < 30


async def test_a_removal_on_one_mirror_removes_it_from_its_peer(pair):
    a, b = pair
    rev = await a.add(REPO, files(b"1"))
    await b.peers.sync_once()
    assert (REPO, rev.commit) in b.held()
    await a.rm(REPO, rev.commit)
    await b.until(lambda: (REPO, rev.commit) not in b.held())
    assert b.store.used_bytes() == 0  # its blobs collected too
    assert [(r.repo, r.commit) for r in b.store.removals()] == [(REPO, rev.commit)]


async def test_a_revision_removed_while_its_peer_was_down_is_removed_there_not_copied_back(pair):
    # The failure guarded: the mirror that was down offered X again and the other took it back.
    a, b = pair
    rev = await a.add(REPO, files(b"1"))
    await b.peers.sync_once()
    port = b.port
    await b.stop()
    await a.rm(REPO, rev.commit)
    await a.peers.sync_once()
    assert a.peers.peers()[0].state == "down"
    # B comes back unable to read A yet, so A reads B first, B still holding X.
    b.link.cut()
    await b.start(port)
    await a.peers.sync_once()
    assert (REPO, rev.commit) not in a.held()
    assert a.peers.peers()[0].state == "in_step"
    b.link.mend()
    await b.peers.sync_once()
    assert (REPO, rev.commit) not in b.held()
    await a.peers.sync_once()
    assert a.held() == b.held() == set()


async def test_a_revision_added_again_after_its_removal_stands_on_both(pair):
    a, b = pair
    content = files(b"1")
    rev = await a.add(REPO, content)
    await b.peers.sync_once()
    await a.rm(REPO, rev.commit)
    await b.peers.sync_once()
    assert b.held() == set()
    again = await a.add(REPO, content)
    assert again.commit == rev.commit and again.added_unix > rev.added_unix
    await b.peers.sync_once()
    await a.peers.sync_once()
    assert a.held() == b.held() == {(REPO, rev.commit)}


async def test_mirrors_partitioned_both_ways_converge_when_they_meet_again(pair):
    a, b = pair
    x = await a.add("org/x", files(b"x"))
    w = await b.add("org/w", files(b"w"))
    await a.peers.sync_once()
    await b.peers.sync_once()
    assert a.held() == b.held() == {("org/x", x.commit), ("org/w", w.commit)}
    a.link.cut()
    b.link.cut()
    # Each side adds one and removes the one the other added.
    y = await a.add("org/y", files(b"y"))
    await a.rm("org/w", w.commit)
    z = await b.add("org/z", files(b"z"))
    await b.rm("org/x", x.commit)
    await a.peers.sync_once()
    await b.peers.sync_once()
    assert a.peers.peers()[0].state == b.peers.peers()[0].state == "down"
    a.link.mend()
    b.link.mend()
    for _ in range(2):
        await a.peers.sync_once()
        await b.peers.sync_once()
    assert a.held() == b.held() == {("org/y", y.commit), ("org/z", z.commit)}
    assert a.peers.peers()[0].state == b.peers.peers()[0].state == "in_step"


async def test_a_copy_whose_bytes_are_not_the_peers_digest_is_refused_and_nothing_kept(pair):
    a, b = pair
    b.link.cut()  # B reads nothing before A's file is spoilt
    rev = await a.add(REPO, files(b"1"))
    big = next(f for f in rev.files if f.path == "model.gguf")
    blob = a.store.blob_path(big.sha256)
    blob.chmod(0o644)
    with blob.open("r+b") as f:
        f.seek(1000)
        f.write(b"not what was added")
    b.link.mend()
    await b.peers.sync_once()
    assert b.held() == set()
    [peer] = b.peers.peers()
    assert peer.state == "behind" and peer.behind == 1
    assert "refused" in peer.reason and "model.gguf" in peer.reason
    assert not b.store.has_blob(big.sha256)
    assert list(b.store.incoming_dir.glob("pull-*")) == []
    # Not fetched again at the next pass (a spoilt file does not mend itself).
    before = b.link.bytes_back
    await b.peers.sync_once()
    assert b.link.bytes_back - before < 20_000
    assert b.peers.peers()[0].reason == peer.reason


async def test_a_copy_cut_midway_resumes_from_the_byte_reached(pair):
    a, b = pair
    b.link.cut_after(600_000)
    rev = await a.add(REPO, files(b"1", size=2_000_000))
    await b.peers.sync_once()
    assert b.held() == set()
    big = next(f for f in rev.files if f.path == "model.gguf")
    part = b.store.incoming_dir / f"pull-{big.sha256}"
    reached = part.stat().st_size
    assert 0 < reached < 2_000_000
    b.link.mend()
    before = b.link.bytes_back
    await b.peers.sync_once()
    assert b.held() == {(REPO, rev.commit)}
    # Only the rest of the file came again (and the state, a few KB), not all of it.
    assert b.link.bytes_back - before < 2_000_000 - reached + 20_000
    assert list(b.store.incoming_dir.glob("pull-*")) == []


async def test_a_peer_that_is_down_does_not_stop_the_others(pair):
    a, b = pair
    dead = await Link(1).start()  # connections to port 1 are refused at once
    await b.add_peer(dead.url)
    rev = await a.add(REPO, files(b"1"))
    await b.peers.sync_once()
    assert (REPO, rev.commit) in b.held()
    states = {p.url: (p.state, p.reason) for p in await b.peer_list()}
    assert states[dead.url][0] == "down" and states[dead.url][1]
    assert states[b.link.url][0] == "in_step"
    await dead.close()


async def test_a_mirror_named_as_its_own_peer_is_shown_down_saying_so(tmp_path):
    m = await PeerMirror(tmp_path / "m", "t").start()
    await m.add_peer(m.url)
    await m.peers.sync_once()
    [peer] = await m.peer_list()
    assert peer.state == "down" and "this mirror itself" in peer.reason
    await m.stop()


async def test_a_peer_refusing_the_token_is_down_saying_which_token(tmp_path):
    a = await PeerMirror(tmp_path / "a", "one-token").start()
    b = await PeerMirror(tmp_path / "b", "another-token").start()
    await b.add_peer(a.url)
    await b.peers.sync_once()
    [peer] = await b.peer_list()
    assert peer.state == "down" and "peer_token_file" in peer.reason
    await a.stop()
    await b.stop()


async def test_peers_added_at_run_time_are_peers_again_after_a_restart(pair):
    a, _ = pair
    port = a.port
    await a.stop()
    await a.start(port)
    assert [p.url for p in await a.peer_list()] == [a.link.url]


async def test_an_engine_archive_comes_across_by_its_digest(pair):
    a, b = pair
    data = os.urandom(100_000)
    rev = await a.add_engine("llama-b9999-bin-ubuntu-x64.tar.gz", data)
    await b.until(lambda: b.store.get("engine", rev.repo, rev.commit) is not None)
    assert b.store.blob_path(rev.commit).read_bytes() == data


async def test_a_ref_moved_on_one_mirror_moves_on_its_peer(pair):
    a, b = pair
    first = await a.add(REPO, files(b"1"))
    await b.peers.sync_once()
    second = await a.add(REPO, files(b"2"))
    await b.peers.sync_once()
    assert b.store.resolve(REPO, "main") == second.commit
    # B's older revision, offered back to A, does not move A's main back.
    await a.peers.sync_once()
    assert a.store.resolve(REPO, "main") == second.commit
    assert a.held() == b.held() == {(REPO, first.commit), (REPO, second.commit)}


async def test_a_mirror_reads_its_peers_every_interval_without_being_told(tmp_path):
    token = secrets.token_urlsafe(16)
    a = await PeerMirror(tmp_path / "a", token).start()
    b = await PeerMirror(tmp_path / "b", token, interval_s=0.05, peers=(a.url,)).start()
    try:
        await b.peers.wait_passes(1)  # the pass at start is over; from here only the interval
        # Held on A through its store, not its API, so no one is told: B's interval brings it.
        rev = a.hold(REPO, files(b"1"))
        await b.until(lambda: (REPO, rev.commit) in b.held())
    finally:
        await b.stop()
        await a.stop()


async def test_a_copy_past_the_quota_is_refused_before_a_byte_saying_what_to_remove(tmp_path):
    token = secrets.token_urlsafe(16)
    a = await PeerMirror(tmp_path / "a", token).start()
    b = await PeerMirror(tmp_path / "b", token, max_bytes=100_000).start()
    link = await Link(a.port).start()
    try:
        await b.add_peer(link.url)
        await a.add(REPO, files(b"1", size=300_000))
        before = link.bytes_back
        await b.peers.sync_once()
        [peer] = b.peers.peers()
        assert peer.state == "behind" and "quota" in peer.reason
        assert b.held() == set()
        assert link.bytes_back - before < 20_000  # the state only, no file
    finally:
        await b.stop()
        await a.stop()
        await link.close()


async def test_three_mirrors_in_a_chain_pass_additions_and_removals_along_it(tmp_path):
    # A - B - C, A and C not peers: what A adds or removes reaches C through B.
    token = secrets.token_urlsafe(16)
    a = await PeerMirror(tmp_path / "a", token).start()
    b = await PeerMirror(tmp_path / "b", token).start()
    c = await PeerMirror(tmp_path / "c", token).start()
    try:
        await a.add_peer(b.url)
        await b.add_peer(a.url)
        await b.add_peer(c.url)
        await c.add_peer(b.url)
        rev = await a.add(REPO, files(b"1"))
        # A tells B; B, having copied it, tells C.
        await c.until(lambda: (REPO, rev.commit) in c.held())
        await a.rm(REPO, rev.commit)
        await c.until(lambda: (REPO, rev.commit) not in c.held())
        assert (REPO, rev.commit) not in b.held()
    finally:
        for m in (c, b, a):
            await m.stop()
