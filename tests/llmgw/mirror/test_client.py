"""The mirror's management client against a real mirror daemon: tokens, answers, refusals, uploads."""

from __future__ import annotations

import hashlib
import socket
import zipfile

import pytest

from llmgw.errors import ExitCode
from llmgw.mirror import wire
from llmgw.mirror.client import MirrorClient, MirrorError, MirrorUnreachable, local_files
from llmgw.mirror.names import NameRefused
from tests.fakes.hub import FakeHub


def _client(m, **kw) -> MirrorClient:
    kw.setdefault("read_token", m.read_token)
    kw.setdefault("admin_token", m.admin_token)
    return MirrorClient(m.url, **kw)


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def test_reads_need_only_the_read_token(mirror):
    mirror.put_model("org/tiny", {"config.json": b"{}"})
    async with _client(mirror, admin_token="") as m:
        assert (await m.health()).mirror_id == mirror.store.mirror_id
        assert (await m.info()).revisions == 1
        assert [r.repo for r in await m.revisions()] == ["org/tiny"]
        assert len((await m.state()).revisions) == 1


async def test_without_a_read_token_reads_carry_no_token_not_the_admin_one(mirror):
    # Guards: the admin token stood in for a missing read token, so a control plane
    # without the read token's file sent its admin token on every read.
    async with _client(mirror, read_token="") as m:
        with pytest.raises(MirrorError) as refused:
            await m.info()
    assert refused.value.code == "unauthorized"
    assert "mirror-read-token" in refused.value.hint


async def test_changes_carry_the_admin_token_and_a_read_token_is_refused_for_them(mirror):
    mirror.put_model("org/tiny", {"config.json": b"{}"})
    async with _client(mirror, admin_token=mirror.read_token) as m:
        with pytest.raises(MirrorError) as refused:
            await m.remove_repo("org/tiny")
    assert refused.value.code == "forbidden"
    assert refused.value.exit_code == ExitCode.UNAUTHENTICATED
    async with _client(mirror) as m:
        removed = await m.remove_repo("org/tiny")
    assert [r.repo for r in removed.removed] == ["org/tiny"]


async def test_a_listing_leaves_files_out_and_a_repository_has_them(mirror):
    mirror.put_model("org/tiny", {"config.json": b"{}", "model.safetensors": b"x" * 10})
    async with _client(mirror) as m:
        (listed,) = await m.revisions()
        (held,) = await m.repo("org/tiny")
    assert listed.files is None and listed.file_count == 2
    assert [f.path for f in held.files] == ["config.json", "model.safetensors"]
    assert held.files[1].sha256 == hashlib.sha256(b"x" * 10).hexdigest()


async def test_a_refusal_carries_the_mirrors_code_message_and_hint(mirror):
    async with _client(mirror) as m:
        with pytest.raises(MirrorError) as refused:
            await m.repo("org/absent")
    assert refused.value.code == "not_found" and refused.value.url == mirror.url
    assert "org/absent" in refused.value.message
    assert "llmgw ctl mirror add hf:org/absent" in refused.value.hint


async def test_a_name_that_cannot_be_a_path_is_refused_before_asking(mirror):
    async with _client(mirror) as m:
        with pytest.raises(NameRefused, match="not a repository name"):
            await m.repo("org/../etc")


async def test_a_mirror_that_does_not_answer_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens
    async with MirrorClient(f"http://127.0.0.1:{port}", read_token="r") as m:
        with pytest.raises(MirrorUnreachable) as down:
            await m.info()
    assert down.value.code == "unavailable" and "did not answer" in down.value.message


async def test_a_hub_that_is_not_a_mirror_is_told_apart(hub):
    # Guards: a hub URL put in mirror.urls answered 404 pages the client took for
    # "the repository is missing"; it must say the URL is not a mirror.
    async with MirrorClient(hub.url, read_token="r") as m:
        with pytest.raises(MirrorError) as wrong:
            await m.info()
    assert "answered 404" in wrong.value.message and "llmgw mirrors" in wrong.value.hint


async def test_a_pull_is_followed_until_it_is_done(hub, start_mirror):
    commit = hub.add_repo("org/tiny", {"config.json": b"{}", "m.gguf": b"m" * 5000})
    mirror = await start_mirror(upstream=hub.url)
    async with _client(mirror) as m:
        pull = await m.start_pull(wire.PullRequest(source="hf:org/tiny@main"))
        seen = [p async for p in m.follow(pull.pull_id)]
        again = await m.pull(pull.pull_id)
        listed = await m.pulls()
    assert seen[-1].state == "done" and seen[-1].bytes_done == 5002
    assert seen[-1].revision.commit == commit
    assert again.state == "done" and [p.pull_id for p in listed] == [pull.pull_id]


async def test_a_follow_ends_with_a_failed_pull_and_its_error(hub, start_mirror):
    mirror = await start_mirror(upstream=hub.url)
    async with _client(mirror) as m:
        pull = await m.start_pull(wire.PullRequest(source="hf:org/missing"))
        last = [p async for p in m.follow(pull.pull_id)][-1]
    assert last.state == "failed" and last.error is not None and "org/missing" in last.error.message


async def test_a_folder_is_uploaded_file_by_file_with_sha256_then_committed(mirror, tmp_path):
    local = tmp_path / "model"
    (local / "sub").mkdir(parents=True)
    (local / "config.json").write_bytes(b'{"a": 1}')
    (local / "sub" / "model.safetensors").write_bytes(b"w" * 3000)
    (local / ".cache").mkdir()
    (local / ".cache" / "junk").write_bytes(b"j")
    seen: list[tuple[str, int, int]] = []
    async with _client(mirror) as m:
        rev = await m.upload_dir(
            local, "org/local", on_progress=lambda p, _d, all_, tot: seen.append((p, all_, tot))
        )
        (held,) = await m.repo("org/local")
    assert rev.repo == "org/local" and "main" in rev.refs
    assert [(f.path, f.sha256) for f in held.files] == [
        ("config.json", hashlib.sha256(b'{"a": 1}').hexdigest()),
        ("sub/model.safetensors", hashlib.sha256(b"w" * 3000).hexdigest()),
    ]
    assert seen[-1] == ("sub/model.safetensors", 3008, 3008)


def test_dotted_files_and_folders_are_left_out_of_an_upload(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"g")
    (tmp_path / ".hidden").write_bytes(b"h")
    assert [p for p, _ in local_files(tmp_path)] == ["a.gguf"]
    assert [p for p, _ in local_files(tmp_path / "a.gguf")] == ["a.gguf"]


async def test_a_wheel_is_put_whole_and_found_by_its_name(mirror, tmp_path):
    wheel = tmp_path / "tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tiny-1.0.dist-info/METADATA", "Name: tiny\nVersion: 1.0\n")
    async with _client(mirror) as m:
        rev = await m.put_artifact("wheel", wheel)
        again = await m.file("wheel", wheel.name)
        removed = await m.remove_file("wheel", wheel.name)
    assert rev.kind == "wheel" and rev.commit == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert again.commit == rev.commit and [r.commit for r in removed.removed] == [rev.commit]


async def test_an_engine_archive_that_is_not_its_pinned_sha256_is_refused(mirror, tmp_path):
    archive = tmp_path / "llama.zip"
    archive.write_bytes(b"PK bytes")
    async with _client(mirror) as m:
        with pytest.raises(MirrorError) as refused:
            await m.put_artifact("engine", archive, sha256="0" * 64)
    assert refused.value.code == "invalid"


async def test_peers_are_added_listed_and_removed_and_du_told(mirror):
    async with _client(mirror) as m:
        assert [p.url for p in await m.add_peer("http://127.0.0.1:9")] == ["http://127.0.0.1:9"]
        assert len(await m.peers()) == 1
        assert await m.remove_peer("http://127.0.0.1:9") == []
        assert (await m.du()).used_bytes == 0
        await m.notify()
