"""The mirror's management client: tokens, answers, refusals, follows and uploads, over real HTTP."""

from __future__ import annotations

import hashlib
import socket

import pytest

from llmgw.errors import ExitCode
from llmgw.mirror import wire
from llmgw.mirror.client import MirrorClient, MirrorError, MirrorUnreachable, local_files
from llmgw.mirror.names import NameRefused
from tests.fakes.hub import FakeHub
from tests.gatewayd.mirrors.wire_fake import ADMIN, READ, WireFake


@pytest.fixture
async def fake():
    async with WireFake() as f:
        yield f


def _client(fake: WireFake, **kw) -> MirrorClient:
    kw.setdefault("read_token", READ)
    kw.setdefault("admin_token", ADMIN)
    return MirrorClient(fake.url, **kw)


async def test_reads_carry_the_read_token_and_changes_the_admin_token(fake):
    fake.hold("org/tiny", "c" * 40, {"config.json": b"{}"})
    async with _client(fake) as m:
        assert (await m.info()).revisions == 1
        assert [r.repo for r in await m.revisions()] == ["org/tiny"]
        await m.remove_repo("org/tiny")
    auth = {(s.method, s.path): s.authorization for s in fake.seen}
    assert auth[("GET", "/v1/info")] == f"Bearer {READ}"
    assert auth[("GET", "/v1/revisions")] == f"Bearer {READ}"
    assert auth[("DELETE", "/v1/repos/org/tiny")] == f"Bearer {ADMIN}"


async def test_a_listing_leaves_files_out_and_a_repository_has_them(fake):
    fake.hold("org/tiny", "c" * 40, {"config.json": b"{}", "model.safetensors": b"x" * 10})
    async with _client(fake) as m:
        (listed,) = await m.revisions()
        (held,) = await m.repo("org/tiny")
    assert listed.files is None and listed.file_count == 2
    assert [f.path for f in held.files] == ["config.json", "model.safetensors"]
    assert held.files[1].sha256 == hashlib.sha256(b"x" * 10).hexdigest()


async def test_a_refusal_carries_the_mirrors_code_message_and_hint(fake):
    async with _client(fake) as m:
        with pytest.raises(MirrorError) as refused:
            await m.start_pull(wire.PullRequest(source="hf:org/quota"))
    assert refused.value.code == "quota"
    assert refused.value.message == "it would pass the quota"
    assert refused.value.hint == "remove org/big (2 GB) first"


async def test_a_read_token_is_refused_for_changes_with_what_to_use(fake):
    async with MirrorClient(fake.url, read_token=READ, admin_token=READ) as m:
        with pytest.raises(MirrorError) as refused:
            await m.du()
    assert refused.value.code == "forbidden"
    assert refused.value.exit_code == ExitCode.UNAUTHENTICATED


async def test_a_name_that_cannot_be_a_path_is_refused_before_asking(fake):
    async with _client(fake) as m:
        with pytest.raises(NameRefused, match="not a repository name"):
            await m.repo("org/../etc")
    assert fake.seen == []


async def test_a_mirror_that_does_not_answer_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens
    async with MirrorClient(f"http://127.0.0.1:{port}", read_token=READ) as m:
        with pytest.raises(MirrorUnreachable) as down:
            await m.info()
    assert down.value.code == "unavailable" and "did not answer" in down.value.message


async def test_a_hub_that_is_not_a_mirror_is_told_apart():
    # Regression: a hub URL put in mirror.urls answered 404 pages the client took for
    # "the repository is missing"; it must say the URL is not a mirror.
    async with FakeHub() as hub, MirrorClient(hub.url, read_token=READ) as m:
        with pytest.raises(MirrorError) as wrong:
            await m.info()
    assert "answered 404" in wrong.value.message and "llmgw mirrors" in wrong.value.hint


async def test_a_follow_streams_a_pull_until_it_is_done(fake):
    async with _client(fake) as m:
        pull = await m.start_pull(wire.PullRequest(source="hf:org/tiny@main"))
        seen = [p async for p in m.follow(pull.pull_id)]
    states = [p.state for p in seen]
    assert states[0] == "fetching" and states[-1] == "done"
    assert any(p.bytes_done == 500 for p in seen)
    assert seen[-1].revision is not None and seen[-1].revision.refs == ["main"]


async def test_a_follow_ends_with_a_failed_pull_and_its_error(fake):
    async with _client(fake) as m:
        pull = await m.start_pull(wire.PullRequest(source="hf:org/missing"))
        last = [p async for p in m.follow(pull.pull_id)][-1]
    assert last.state == "failed" and last.error.code == "not_found"


async def test_a_folder_is_uploaded_file_by_file_with_sha256_then_committed(fake, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "config.json").write_bytes(b'{"a": 1}')
    (tmp_path / "sub" / "model.safetensors").write_bytes(b"w" * 3000)
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "junk").write_bytes(b"j")
    (tmp_path / ".gitattributes").write_bytes(b"*")
    seen: list[tuple[str, int, int]] = []
    async with _client(fake) as m:
        rev = await m.upload_dir(
            tmp_path, "org/local", on_progress=lambda p, _d, all_, tot: seen.append((p, all_, tot))
        )
    assert rev.repo == "org/local" and rev.refs == ["main"]
    assert [f.path for f in rev.files] == ["config.json", "sub/model.safetensors"]
    puts = [s for s in fake.seen if s.method == "PUT"]
    assert [s.headers["X-Llmgw-Sha256"] for s in puts] == [
        hashlib.sha256(b'{"a": 1}').hexdigest(),
        hashlib.sha256(b"w" * 3000).hexdigest(),
    ]
    assert all(s.authorization == f"Bearer {ADMIN}" for s in puts)
    assert seen[-1] == ("sub/model.safetensors", 3008, 3008)


def test_dotted_files_and_folders_are_left_out_of_an_upload(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"g")
    (tmp_path / ".hidden").write_bytes(b"h")
    assert [p for p, _ in local_files(tmp_path)] == ["a.gguf"]
    assert [p for p, _ in local_files(tmp_path / "a.gguf")] == ["a.gguf"]


async def test_a_wheel_is_put_whole_with_its_sha256(fake, tmp_path):
    wheel = tmp_path / "tiny-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK wheel bytes")
    async with _client(fake) as m:
        rev = await m.put_artifact("wheel", wheel)
        again = await m.file("wheel", wheel.name)
    assert rev.kind == "wheel" and rev.commit == hashlib.sha256(b"PK wheel bytes").hexdigest()
    assert again.commit == rev.commit
    assert fake.bodies[f"wheel/{wheel.name}"] == b"PK wheel bytes"


async def test_peers_are_added_listed_and_removed(fake):
    async with _client(fake) as m:
        assert [p.url for p in await m.add_peer("http://10.0.0.6:7080")] == ["http://10.0.0.6:7080"]
        assert len(await m.peers()) == 1
        assert await m.remove_peer("http://10.0.0.6:7080") == []
