"""Two mirrors on loopback peered both ways: additions and removals carried, neither leading."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.mirrord.peer_helpers import Link, TinyMirror, put_model

TOKEN = "read-token-for-peers"
REPO = "org/tiny"


def files(seed: bytes, size: int = 300_000) -> dict[str, bytes]:
    return {"config.json": b'{"seed": "%s"}' % seed, "model.gguf": os.urandom(size)}


@pytest.fixture
async def pair(tmp_path):
    """A and B, each reading the other through a Link (cut it for a partition)."""
    a = await TinyMirror(tmp_path / "a", TOKEN).start()
    b = await TinyMirror(tmp_path / "b", TOKEN).start()
    a_to_b = await Link(b.server.port).start()
    b_to_a = await Link(a.server.port).start()
    a.peers.add(a_to_b.url)
    b.peers.add(b_to_a.url)
    a.link, b.link = a_to_b, b_to_a
    yield a, b
    for m in (a, b):
        await m.stop()
        await m.link.close()


def held(m: TinyMirror) -> set[tuple[str, str]]:
    return {(r.repo, r.commit) for r in m.store.revisions()}


async def until(m: TinyMirror, condition) -> None:
    """Wait (on m's sync passes, not on a clock) until ``condition()`` holds."""
    async with asyncio.timeout(30):
        while not condition():
            await m.peers.wait_passes(m.peers.passes + 1)


async def test_an_add_on_one_mirror_appears_on_its_peer_with_its_time_refs_and_bytes(pair):
    a, b = pair
    content = files(b"1")
    rev = put_model(a.store, REPO, content)
    a.peers.notify()
    await until(b, lambda: (REPO, rev.commit) in held(b))
    copy = b.store.get("model", REPO, rev.commit)
    assert copy.added_unix == rev.added_unix and copy.refs == ["main"]
    for f in copy.files:
        assert b.store.blob_path(f.sha256).read_bytes() == content[f.path]
    [peer] = b.peers.peers()
    assert (peer.state, peer.behind, peer.reason) == ("in_step", 0, "")
    assert 0 <= peer.lag_s < 30


async def test_a_removal_on_one_mirror_removes_it_from_its_peer(pair):
    a, b = pair
    rev = put_model(a.store, REPO, files(b"1"))
    await b.peers.sync_once()
    assert (REPO, rev.commit) in held(b)
    a.store.remove("model", REPO, rev.commit)
    a.peers.notify()
    await until(b, lambda: (REPO, rev.commit) not in held(b))
    assert b.store.used_bytes() == 0  # its blobs collected too
    assert [(r.repo, r.commit) for r in b.store.removals()] == [(REPO, rev.commit)]


async def test_a_revision_removed_while_its_peer_was_down_is_removed_there_not_copied_back(
    pair, tmp_path
):
    # The failure guarded: the mirror that was down offered X again and the other took it back.
    a, b = pair
    rev = put_model(a.store, REPO, files(b"1"))
    await b.peers.sync_once()
    port = b.server.port
    await b.stop()
    a.store.remove("model", REPO, rev.commit)
    await a.peers.sync_once()
    assert a.peers.peers()[0].state == "down"
    b = await TinyMirror(tmp_path / "b", TOKEN).start(port, loop=False)
    await a.peers.sync_once()  # A reads B, which still holds X: A must not take it back
    assert (REPO, rev.commit) not in held(a)
    await b.peers.sync_once()
    assert (REPO, rev.commit) not in held(b)
    await a.peers.sync_once()
    assert held(a) == held(b) == set()
    await b.stop()
    b.server.port = port  # the fixture stops it again


async def test_a_revision_added_again_after_its_removal_stands_on_both(pair):
    a, b = pair
    content = files(b"1")
    rev = put_model(a.store, REPO, content)
    await b.peers.sync_once()
    a.store.remove("model", REPO, rev.commit)
    await b.peers.sync_once()
    assert held(b) == set()
    again = put_model(a.store, REPO, content)
    assert again.commit == rev.commit and again.added_unix > rev.added_unix
    await b.peers.sync_once()
    await a.peers.sync_once()
    assert held(a) == held(b) == {(REPO, rev.commit)}


async def test_mirrors_partitioned_both_ways_converge_when_they_meet_again(pair):
    a, b = pair
    x = put_model(a.store, "org/x", files(b"x"))
    w = put_model(b.store, "org/w", files(b"w"))
    await a.peers.sync_once()
    await b.peers.sync_once()
    assert held(a) == held(b) == {("org/x", x.commit), ("org/w", w.commit)}
    a.link.cut()
    b.link.cut()
    # Each side adds one and removes the one the other added.
    y = put_model(a.store, "org/y", files(b"y"))
    a.store.remove("model", "org/w", w.commit)
    z = put_model(b.store, "org/z", files(b"z"))
    b.store.remove("model", "org/x", x.commit)
    await a.peers.sync_once()
    await b.peers.sync_once()
    assert a.peers.peers()[0].state == b.peers.peers()[0].state == "down"
    a.link.mend()
    b.link.mend()
    for _ in range(2):
        await a.peers.sync_once()
        await b.peers.sync_once()
    assert held(a) == held(b) == {("org/y", y.commit), ("org/z", z.commit)}
    assert a.peers.peers()[0].state == b.peers.peers()[0].state == "in_step"


async def test_a_copy_whose_bytes_are_not_the_peers_digest_is_refused_and_nothing_kept(pair):
    a, b = pair
    rev = put_model(a.store, REPO, files(b"1"))
    big = next(f for f in rev.files if f.path == "model.gguf")
    blob = a.store.blob_path(big.sha256)
    blob.chmod(0o644)
    with blob.open("r+b") as f:
        f.seek(1000)
        f.write(b"not what was added")
    await b.peers.sync_once()
    assert held(b) == set()
    [peer] = b.peers.peers()
    assert peer.state == "behind" and peer.behind == 1
    assert "refused" in peer.reason and "model.gguf" in peer.reason
    assert not b.store.has_blob(big.sha256)
    assert list(b.store.incoming_dir.iterdir()) == []


async def test_a_copy_cut_midway_resumes_from_the_byte_reached(pair):
    a, b = pair
    rev = put_model(a.store, REPO, files(b"1", size=2_000_000))
    b.link.cut_after(600_000)
    await b.peers.sync_once()
    assert held(b) == set()
    big = next(f for f in rev.files if f.path == "model.gguf")
    part = b.store.incoming_dir / f"peer-{big.sha256}.part"
    reached = part.stat().st_size
    assert 0 < reached < 2_000_000
    b.link.mend()
    before = b.link.bytes_back
    await b.peers.sync_once()
    assert held(b) == {(REPO, rev.commit)}
    # Only the rest of the file came again (and the state, a few KB), not all of it.
    assert b.link.bytes_back - before < 2_000_000 - reached + 20_000
    assert list(b.store.incoming_dir.iterdir()) == []


async def test_a_peer_that_is_down_does_not_stop_the_others(pair, tmp_path):
    a, b = pair
    dead = await Link(1).start()  # connections to port 1 are refused at once
    b.peers.add(dead.url)
    rev = put_model(a.store, REPO, files(b"1"))
    await b.peers.sync_once()
    assert (REPO, rev.commit) in held(b)
    states = {p.url: (p.state, p.reason) for p in b.peers.peers()}
    assert states[dead.url][0] == "down" and states[dead.url][1]
    assert states[b.link.url][0] == "in_step"
    await dead.close()


async def test_a_mirror_named_as_its_own_peer_is_shown_down_saying_so(tmp_path):
    m = await TinyMirror(tmp_path / "m", TOKEN).start(loop=False)
    m.peers.add(m.url)
    await m.peers.sync_once()
    [peer] = m.peers.peers()
    assert peer.state == "down" and "this mirror itself" in peer.reason
    await m.stop()


async def test_a_peer_refusing_the_token_is_down_saying_which_token(tmp_path):
    a = await TinyMirror(tmp_path / "a", TOKEN).start(loop=False)
    b = await TinyMirror(tmp_path / "b", "another-token").start(loop=False)
    b.peers.add(a.url)
    await b.peers.sync_once()
    [peer] = b.peers.peers()
    assert peer.state == "down" and "peer_token_file" in peer.reason
    await a.stop()
    await b.stop()
