"""The Mirror* admin RPCs of a real gatewayd, through the admin client, against its mirrors."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket

import pytest

from llmgw.errors import AdminUnreachable, NotFoundError, UsageError
from proto.llmgw.v1 import MirrorAddRequest
from tests.cluster_fixture import running_cluster
from tests.gatewayd.mirrors.wire_fake import ADMIN, READ, WireFake


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@contextlib.asynccontextmanager
async def cluster_with(tmp_path, *urls: str):
    admin_file = tmp_path / "mirror-admin-token"
    admin_file.write_text(ADMIN + "\n")
    read_file = tmp_path / "mirror-read-token"
    read_file.write_text(READ + "\n")

    def configure(cfg):
        cfg.mirror.urls = list(urls)
        cfg.mirror.admin_token_file = str(admin_file)
        cfg.mirror.read_token_file = str(read_file)

    async with running_cluster(tmp_path, configure=configure) as c:
        yield c


@pytest.fixture
async def fake():
    async with WireFake() as f:
        yield f


async def test_status_and_list_show_each_mirror_with_its_state_then_what_the_first_up_holds(
    tmp_path, fake
):
    fake.hold("org/tiny", "c" * 40, {"config.json": b"{}", "model.safetensors": b"w" * 100})
    dead = _dead_url()
    async with cluster_with(tmp_path, dead, fake.url) as c, c.admin() as admin:
        listed = await admin.list_mirrors()
        status = await admin.status()
    assert [(m.url, m.state) for m in listed.mirrors] == [(dead, "down"), (fake.url, "up")]
    assert "did not answer" in listed.mirrors[0].reason
    assert listed.mirrors[1].revisions == 1 and listed.mirrors[1].max_bytes == 10 << 30
    assert listed.served_by == fake.url
    (rev,) = listed.revisions
    assert (rev.repo, rev.commit, rev.refs, rev.files) == ("org/tiny", "c" * 40, ["main"], 2)
    assert [(m.url, m.state) for m in status.mirrors] == [(dead, "down"), (fake.url, "up")]


async def test_a_cluster_without_mirrors_says_how_to_have_one(tmp_path):
    async with running_cluster(tmp_path) as c, c.admin() as admin:
        with pytest.raises(UsageError, match="set mirror.urls in server.yaml"):
            await admin.list_mirrors()
        assert list((await admin.status()).mirrors) == []


async def test_an_add_of_a_hub_repository_is_followed_to_the_revision_held(tmp_path, fake):
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        seen = [
            p
            async for p in admin.add_to_mirror(
                MirrorAddRequest(source="hf:org/tiny@main", include=["*.gguf"])
            )
        ]
    states = [p.pull.state for p in seen]
    assert states[0] == "queued" and "fetching" in states and states[-1] == "done"
    assert any(p.pull.bytes_done == 500 and p.pull.eta_s == 1.0 for p in seen)
    assert seen[-1].revision.repo == "org/tiny" and seen[-1].revision.refs == ["main"]
    (post,) = [s for s in fake.seen if s.method == "POST" and s.path == "/v1/pulls"]
    assert post.authorization == f"Bearer {ADMIN}"


async def test_a_detached_add_answers_at_once_with_the_pull(tmp_path, fake):
    fake.gate = asyncio.Event()
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        seen = [
            p
            async for p in admin.add_to_mirror(MirrorAddRequest(source="hf:org/tiny", detach=True))
        ]
        assert len(seen) == 1 and seen[0].pull.pull_id == "p1"
        listed = await admin.list_mirrors()
    assert [p.pull_id for p in listed.pulls] == ["p1"]


async def test_a_failed_pull_ends_with_the_mirrors_words(tmp_path, fake):
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        seen = [p async for p in admin.add_to_mirror(MirrorAddRequest(source="hf:org/missing"))]
    assert seen[-1].pull.state == "failed"
    assert "org/missing is not on the hub" in seen[-1].pull.error


async def test_an_add_over_the_quota_is_refused_with_what_to_remove(tmp_path, fake):
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        with pytest.raises(UsageError) as refused:
            [p async for p in admin.add_to_mirror(MirrorAddRequest(source="hf:org/quota"))]
    assert "remove org/big (2 GB) first" in refused.value.message


async def test_a_local_folder_is_read_by_gatewayd_and_uploaded_as_one_revision(tmp_path, fake):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes(b"{}")
    (model / "model.safetensors").write_bytes(b"w" * 5000)
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        seen = [
            p
            async for p in admin.add_to_mirror(
                MirrorAddRequest(source=str(model), as_repo="org/local")
            )
        ]
        shown = await admin.show_mirror_repo("org/local")
    assert seen[-1].pull.state == "done" and seen[-1].pull.bytes_done == 5002
    assert seen[-1].revision.repo == "org/local" and seen[-1].revision.source == "upload"
    assert [f.path for f in shown.files] == ["config.json", "model.safetensors"]
    assert shown.files[1].sha256 == hashlib.sha256(b"w" * 5000).hexdigest()


async def test_a_local_folder_without_a_repository_name_is_refused(tmp_path, fake):
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        with pytest.raises(UsageError, match="--as org/name"):
            [p async for p in admin.add_to_mirror(MirrorAddRequest(source=str(tmp_path)))]


async def test_a_folder_of_wheels_is_put_wheel_by_wheel(tmp_path, fake):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "a-1.0-py3-none-any.whl").write_bytes(b"A")
    (wheels / "b-2.0-py3-none-any.whl").write_bytes(b"BB")
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        seen = [
            p async for p in admin.add_to_mirror(MirrorAddRequest(source=str(wheels), kind="wheel"))
        ]
        one = await admin.show_mirror_repo("b-2.0-py3-none-any.whl")
    held = [p.revision.repo for p in seen if p.revision]
    assert held == ["a-1.0-py3-none-any.whl", "b-2.0-py3-none-any.whl"]
    assert one.revisions[0].kind == "wheel" and one.files[0].size_bytes == 2


async def test_show_names_one_revision_by_ref_or_commit_digits(tmp_path, fake):
    fake.hold("org/tiny", "a" * 40, {"x": b"1"}, refs=("v1",))
    fake.hold("org/tiny", "b" * 40, {"x": b"22"}, refs=("main",))
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        every = await admin.show_mirror_repo("org/tiny")
        v1 = await admin.show_mirror_repo("org/tiny", "v1")
        by_digits = await admin.show_mirror_repo("org/tiny", "bbbbbbbbbbbb")
        with pytest.raises(NotFoundError, match="no revision 'v9'"):
            await admin.show_mirror_repo("org/tiny", "v9")
        with pytest.raises(NotFoundError, match="holds no org/absent"):
            await admin.show_mirror_repo("org/absent")
    assert [r.commit for r in every.revisions] == ["b" * 40, "a" * 40]
    assert [r.commit for r in v1.revisions] == ["a" * 40] and v1.files[0].size_bytes == 1
    assert [r.commit for r in by_digits.revisions] == ["b" * 40]


async def test_remove_du_and_peers_go_to_the_mirror_with_the_admin_token(tmp_path, fake):
    fake.hold("org/tiny", "a" * 40, {"x": b"1" * 10})
    async with cluster_with(tmp_path, fake.url) as c, c.admin() as admin:
        du = await admin.mirror_disk_usage()
        removed = await admin.remove_from_mirror("org/tiny", "main")
        added = await admin.add_mirror_peer("http://10.0.0.6:7080")
        listed = await admin.list_mirror_peers()
        gone = await admin.remove_mirror_peer("http://10.0.0.6:7080")
    assert du.used_bytes == 10 and du.served_by == fake.url and du.revisions[0].repo == "org/tiny"
    assert [r.commit for r in removed.removed] == ["a" * 40] and removed.freed_bytes == 10
    assert [p.url for p in added.peers] == ["http://10.0.0.6:7080"] == [p.url for p in listed.peers]
    assert list(gone.peers) == []
    changes = [s for s in fake.seen if s.method != "GET" or s.path in ("/v1/du", "/v1/peers")]
    assert changes and all(s.authorization == f"Bearer {ADMIN}" for s in changes)


async def test_every_mirror_down_is_unavailable_naming_them(tmp_path):
    dead = _dead_url()
    async with cluster_with(tmp_path, dead) as c, c.admin() as admin:
        with pytest.raises(AdminUnreachable, match="no mirror answered"):
            await admin.mirror_disk_usage()
        listed = await admin.list_mirrors()
    assert listed.mirrors[0].state == "down" and listed.served_by == ""
