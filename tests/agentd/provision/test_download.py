"""Streamed downloads: progress, resume with Range, and the pinned digest."""

from __future__ import annotations

import hashlib
import os

import pytest

from agentd.provision.download import ChecksumMismatch, DownloadError, download, partial_path

PAYLOAD = os.urandom(5 * 1024 * 1024 + 123)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


async def test_a_download_reports_increasing_progress_and_lands_under_its_name(
    file_server, tmp_path
):
    url = file_server.add("llama-b4500-bin-ubuntu-x64.zip", PAYLOAD)
    seen: list[tuple[int, int]] = []

    path = await download(url, tmp_path, DIGEST, progress=lambda d, t: seen.append((d, t)))

    assert path == tmp_path / "llama-b4500-bin-ubuntu-x64.zip"
    assert path.read_bytes() == PAYLOAD
    done = [d for d, _ in seen]
    assert len(seen) > 2 and done == sorted(done) and done[-1] == len(PAYLOAD)
    assert {t for _, t in seen} == {len(PAYLOAD)}
    assert os.listdir(tmp_path) == [path.name]


async def test_a_partial_download_is_resumed_with_a_range_request(file_server, tmp_path):
    # Guards the agent that lost its link at 60% of a 400 MB CUDA build and
    # started again from byte 0, every time.
    name = "llama-b4500.tar.gz"
    url = file_server.add(name, PAYLOAD)
    half = len(PAYLOAD) // 2
    partial_path(tmp_path, name, DIGEST).write_bytes(PAYLOAD[:half])
    seen: list[int] = []

    path = await download(url, tmp_path, DIGEST, progress=lambda d, t: seen.append(d))

    assert path.read_bytes() == PAYLOAD
    assert file_server.requests == [(name, f"bytes={half}-")]
    assert seen[0] == half, "progress starts where the partial stopped"
    assert not partial_path(tmp_path, name, DIGEST).exists()


async def test_a_server_that_ignores_range_gets_the_file_from_the_start(file_server, tmp_path):
    name = "llama-b4500.tar.gz"
    url = file_server.add(name, PAYLOAD)
    file_server.honour_range = False
    partial_path(tmp_path, name, DIGEST).write_bytes(b"garbage from another try")

    path = await download(url, tmp_path, DIGEST)

    assert path.read_bytes() == PAYLOAD


async def test_a_partial_that_already_holds_every_byte_is_not_fetched_again(file_server, tmp_path):
    name = "llama-b4500.tar.gz"
    url = file_server.add(name, PAYLOAD)
    partial_path(tmp_path, name, DIGEST).write_bytes(PAYLOAD)

    path = await download(url, tmp_path, DIGEST)

    assert path.read_bytes() == PAYLOAD
    assert file_server.requests == [(name, f"bytes={len(PAYLOAD)}-")]


async def test_bytes_that_do_not_match_the_pin_are_refused_and_deleted(file_server, tmp_path):
    url = file_server.add("llama-b4500.tar.gz", PAYLOAD)
    wrong = "ab" * 32

    with pytest.raises(ChecksumMismatch) as caught:
        await download(url, tmp_path, wrong)

    assert f"expected {wrong}, got {DIGEST}" in str(caught.value)
    assert os.listdir(tmp_path) == []


async def test_a_missing_release_is_reported_with_the_servers_answer(file_server, tmp_path):
    with pytest.raises(DownloadError, match="answered 404 Not Found"):
        await download(file_server.url("llama-b0.tar.gz"), tmp_path, DIGEST)


async def test_a_server_that_cannot_be_reached_keeps_the_partial_for_the_next_try(tmp_path):
    name = "llama-b4500.tar.gz"
    partial_path(tmp_path, name, DIGEST).write_bytes(PAYLOAD[:10])

    with pytest.raises(DownloadError, match="could not download"):
        # Port 9 (discard) on loopback: nothing listens there.
        await download(f"http://127.0.0.1:9/{name}", tmp_path, DIGEST)

    assert partial_path(tmp_path, name, DIGEST).read_bytes() == PAYLOAD[:10]


async def test_a_digest_that_is_not_a_sha256_is_refused_before_anything_is_fetched(tmp_path):
    with pytest.raises(DownloadError, match="is not a sha256"):
        await download("http://127.0.0.1:9/x.tar.gz", tmp_path, "md5:abc")
