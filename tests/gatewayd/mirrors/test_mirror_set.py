"""The control plane's mirrors (real mirror daemons): probed, ordered up first, called in turn."""

from __future__ import annotations

import os
import socket

import pytest

from gatewayd.mirrors.set import DOWN, UNKNOWN, UP, MirrorSet
from llmgw.mirror.client import MirrorError, MirrorUnreachable
from llmgw.mirror.config import MirrorsConfig
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _set(m, *urls: str, **tokens) -> MirrorSet:
    tokens.setdefault("read_token", m.read_token)
    tokens.setdefault("admin_token", m.admin_token)
    return MirrorSet(MirrorsConfig(urls=list(urls)), **tokens)


async def test_a_mirror_is_unknown_until_probed_then_up_with_what_it_told(mirror):
    mirror.put_model("org/tiny", {"a": b"x" * 10})
    mirrors = _set(mirror, mirror.url)
    try:
        (state,) = mirrors.states()
        assert state.state == UNKNOWN and state.checked_at is None
        await mirrors.probe_once()
        assert state.state == UP and state.reason == ""
        assert state.info.revisions == 1 and state.info.used_bytes == 10
        assert mirrors.first_up() == mirror.url
    finally:
        await mirrors.aclose()


async def test_the_probe_needs_only_the_read_token(mirror):
    mirrors = _set(mirror, mirror.url, admin_token="")
    try:
        await mirrors.probe_once()
        assert mirrors.states()[0].state == UP
    finally:
        await mirrors.aclose()


async def test_a_mirror_that_does_not_answer_is_down_with_why_and_ordered_last(mirror):
    dead = _dead_url()
    mirrors = _set(mirror, dead, mirror.url)
    try:
        assert mirrors.ordered() == [dead, mirror.url]  # config order while unknown
        await mirrors.probe_once()
        down, up = mirrors.states()
        assert down.state == DOWN and "did not answer" in down.reason
        assert up.state == UP
        assert mirrors.ordered() == [mirror.url, dead]
        assert mirrors.first_up() == mirror.url
    finally:
        await mirrors.aclose()


async def test_a_mirror_refusing_the_read_token_is_down_saying_so(mirror):
    mirrors = _set(mirror, mirror.url, read_token="wrong", admin_token="")
    try:
        await mirrors.probe_once()
        (state,) = mirrors.states()
        assert state.state == DOWN and "read token" in state.reason
    finally:
        await mirrors.aclose()


async def test_a_call_falls_through_to_the_next_mirror_that_answers(mirror):
    mirror.put_model("org/tiny", {"a": b"x" * 10})
    dead = _dead_url()
    mirrors = _set(mirror, dead, mirror.url)
    try:
        served_by, du = await mirrors.call(lambda m: m.du())
        assert served_by == mirror.url and du.used_bytes == 10
        # The one that did not answer is marked down without waiting for a probe.
        assert mirrors.states()[0].state == DOWN
    finally:
        await mirrors.aclose()


async def test_a_refusal_is_the_answer_and_no_other_mirror_is_asked(start_mirror):
    first = await start_mirror()
    second = await start_mirror()
    second.put_model("org/absent", {"a": b"x"})  # held there, but the first one answered
    mirrors = _set(first, first.url, second.url)
    try:
        with pytest.raises(MirrorError) as refused:
            await mirrors.call(lambda m: m.repo("org/absent"))
        assert refused.value.code == "not_found" and refused.value.url == first.url
    finally:
        await mirrors.aclose()


async def test_no_mirror_answering_says_which_were_tried():
    dead_a, dead_b = _dead_url(), _dead_url()
    mirrors = MirrorSet(MirrorsConfig(urls=[dead_a, dead_b]), read_token="r")
    try:
        with pytest.raises(MirrorUnreachable) as down:
            await mirrors.call(lambda m: m.info())
        assert dead_a in down.value.message and dead_b in down.value.message
    finally:
        await mirrors.aclose()


async def test_tokens_are_read_from_their_files_and_again_when_they_change(mirror, tmp_path):
    read_file = tmp_path / "mirror-read-token"
    read_file.write_text("old\n")
    mirrors = _set(mirror, mirror.url, read_token=read_file)
    try:
        assert mirrors.read_token == "old"
        await mirrors.probe_once()
        assert mirrors.states()[0].state == DOWN
        read_file.write_text(mirror.read_token + "\n")
        # A new file (another inode, another time) as `server init --mirror` writes it.
        os.utime(read_file, ns=(1, 1))
        await mirrors.probe_once()
        assert mirrors.states()[0].state == UP and mirrors.read_token == mirror.read_token
    finally:
        await mirrors.aclose()


async def test_an_https_mirror_is_trusted_by_the_clusters_ca(tmp_path, start_mirror):
    paths = Paths.under(tmp_path / "cp")
    init_server(paths, hosts=["localhost", "127.0.0.1"])
    # The mirror shows a certificate the cluster's CA signed (here: the control plane's own).
    m = await start_mirror(tls={"cert": str(paths.server_cert), "key": str(paths.server_key)})
    assert m.url.startswith("https://")
    admin_file = tmp_path / "admin"
    admin_file.write_text(m.admin_token)
    read_file = tmp_path / "read"
    read_file.write_text(m.read_token)
    cfg = MirrorsConfig(urls=[m.url], read_token_file=str(read_file))
    mirrors = MirrorSet.from_config(cfg, paths, admin_token=admin_file)
    try:
        await mirrors.probe_once()
        assert mirrors.states()[0].state == UP, mirrors.states()[0].reason
        assert (await mirrors.call(lambda c: c.du()))[1].used_bytes == 0
    finally:
        await mirrors.aclose()
    # Without the cluster's CA the same mirror is not trusted.
    plain = MirrorSet(cfg, read_token=m.read_token)
    try:
        await plain.probe_once()
        assert plain.states()[0].state == DOWN and "certificate" in plain.states()[0].reason.lower()
    finally:
        await plain.aclose()
