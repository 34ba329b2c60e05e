"""The control plane's mirrors: probed, ordered up first, called in turn, tokens read from files."""

from __future__ import annotations

import os
import socket

import pytest

from gatewayd.mirrors.set import DOWN, UNKNOWN, UP, MirrorSet
from llmgw.mirror.client import MirrorError, MirrorUnreachable
from llmgw.mirror.config import MirrorsConfig
from tests.gatewayd.mirrors.wire_fake import ADMIN, READ, WireFake


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
async def fake():
    async with WireFake() as f:
        yield f


async def test_a_mirror_is_unknown_until_probed_then_up_with_what_it_told(fake):
    fake.hold("org/tiny", "c" * 40, {"a": b"x" * 10})
    mirrors = MirrorSet(MirrorsConfig(urls=[fake.url]), read_token=READ, admin_token=ADMIN)
    try:
        (state,) = mirrors.states()
        assert state.state == UNKNOWN and state.checked_at is None
        await mirrors.probe_once()
        assert state.state == UP and state.reason == ""
        assert state.info.revisions == 1 and state.info.used_bytes == 10
        assert mirrors.first_up() == fake.url
    finally:
        await mirrors.aclose()
    # The probe reads with the read token, never the admin one.
    assert fake.seen[-1].authorization == f"Bearer {READ}"


async def test_a_mirror_that_does_not_answer_is_down_with_why_and_ordered_last(fake):
    dead = _dead_url()
    mirrors = MirrorSet(MirrorsConfig(urls=[dead, fake.url]), read_token=READ, admin_token=ADMIN)
    try:
        assert mirrors.ordered() == [dead, fake.url]  # config order while unknown
        await mirrors.probe_once()
        down, up = mirrors.states()
        assert down.state == DOWN and "did not answer" in down.reason
        assert up.state == UP
        assert mirrors.ordered() == [fake.url, dead]
        assert mirrors.first_up() == fake.url
    finally:
        await mirrors.aclose()


async def test_a_mirror_refusing_the_read_token_is_down_saying_so(fake):
    mirrors = MirrorSet(MirrorsConfig(urls=[fake.url]), read_token="wrong", admin_token=ADMIN)
    try:
        await mirrors.probe_once()
        (state,) = mirrors.states()
        assert state.state == DOWN and "read token" in state.reason
    finally:
        await mirrors.aclose()


async def test_a_call_falls_through_to_the_next_mirror_that_answers(fake):
    dead = _dead_url()
    mirrors = MirrorSet(MirrorsConfig(urls=[dead, fake.url]), read_token=READ, admin_token=ADMIN)
    try:
        served_by, du = await mirrors.call(lambda m: m.du())
        assert served_by == fake.url and du.max_bytes == 10 << 30
        # The one that did not answer is marked down without waiting for a probe.
        assert mirrors.states()[0].state == DOWN
    finally:
        await mirrors.aclose()


async def test_a_refusal_is_the_answer_and_no_other_mirror_is_asked():
    async with WireFake() as first, WireFake() as second:
        cfg = MirrorsConfig(urls=[first.url, second.url])
        mirrors = MirrorSet(cfg, read_token=READ, admin_token=ADMIN)
        try:
            with pytest.raises(MirrorError) as refused:
                await mirrors.call(lambda m: m.repo("org/absent"))
            assert refused.value.code == "not_found"
        finally:
            await mirrors.aclose()
        assert second.seen == []


async def test_no_mirror_answering_says_which_were_tried():
    dead_a, dead_b = _dead_url(), _dead_url()
    mirrors = MirrorSet(MirrorsConfig(urls=[dead_a, dead_b]), read_token=READ)
    try:
        with pytest.raises(MirrorUnreachable) as down:
            await mirrors.call(lambda m: m.info())
        assert dead_a in down.value.message and dead_b in down.value.message
    finally:
        await mirrors.aclose()


async def test_tokens_are_read_from_their_files_and_again_when_they_change(fake, tmp_path):
    read_file = tmp_path / "mirror-read-token"
    read_file.write_text("old\n")
    mirrors = MirrorSet(MirrorsConfig(urls=[fake.url]), read_token=read_file, admin_token=ADMIN)
    try:
        assert mirrors.read_token == "old"
        await mirrors.probe_once()
        assert mirrors.states()[0].state == DOWN
        read_file.write_text(READ + "\n")
        # A new file (another inode, another time) as `server init --mirror` writes it.
        os.utime(read_file, ns=(1, 1))
        await mirrors.probe_once()
        assert mirrors.states()[0].state == UP and mirrors.read_token == READ
    finally:
        await mirrors.aclose()
