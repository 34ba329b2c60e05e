"""The Mirror* admin RPCs of a real gatewayd, through the admin client, against real mirrors."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import zipfile

import pytest

from llmgw.errors import AdminUnreachable, NotFoundError, UsageError
from llmgw.mirror.pins import load_pins
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from proto.llmgw.v1 import MirrorAddRequest, PlanModelRequest
from tests.cluster_fixture import running_cluster
from tests.fakes.hub import FakeHub
from tests.llmgw.modelplan.test_gguf_meta import write_gguf


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _wheel(folder, name: str, version: str):
    """A wheel as pip writes one, as small as it gets."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\nVersion: {version}\n")
        z.writestr(f"{name}/__init__.py", "")
    return path


@contextlib.asynccontextmanager
async def cluster_with(tmp_path, tokens, *urls: str):
    """A gatewayd whose server.yaml names ``urls``, with ``tokens``' read and admin tokens."""
    admin_file = tmp_path / "mirror-admin-token"
    admin_file.write_text(tokens.admin_token + "\n")
    read_file = tmp_path / "mirror-read-token"
    read_file.write_text(tokens.read_token + "\n")

    def configure(cfg):
        cfg.mirror.urls = list(urls)
        cfg.mirror.admin_token_file = str(admin_file)
        cfg.mirror.read_token_file = str(read_file)

    async with running_cluster(tmp_path, configure=configure) as c:
        yield c


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def _add(admin, **request) -> list:
    return [p async for p in admin.add_to_mirror(MirrorAddRequest(**request))]


async def test_status_and_list_show_each_mirror_with_its_state_then_what_the_first_up_holds(
    tmp_path, mirror
):
    rev = mirror.put_model("org/tiny", {"config.json": b"{}", "model.safetensors": b"w" * 100})
    dead = _dead_url()
    async with cluster_with(tmp_path, mirror, dead, mirror.url) as c, c.admin() as admin:
        listed = await admin.list_mirrors()
        status = await admin.status()
    assert [(m.url, m.state) for m in listed.mirrors] == [(dead, "down"), (mirror.url, "up")]
    assert "did not answer" in listed.mirrors[0].reason
    up = listed.mirrors[1]
    assert up.revisions == 1 and up.used_bytes == 102 and up.mirror_id == mirror.store.mirror_id
    assert listed.served_by == mirror.url
    (held,) = listed.revisions
    assert (held.repo, held.commit, list(held.refs), held.files) == (
        "org/tiny",
        rev.commit,
        ["main"],
        2,
    )
    assert [(m.url, m.state) for m in status.mirrors] == [(dead, "down"), (mirror.url, "up")]


async def test_a_cluster_without_mirrors_lists_none_and_refuses_an_add_saying_how_to_have_one(
    tmp_path,
):
    async with running_cluster(tmp_path) as c, c.admin() as admin:
        listed = await admin.list_mirrors()
        assert list(listed.mirrors) == [] and list(listed.revisions) == []
        assert list((await admin.status()).mirrors) == []
        with pytest.raises(UsageError, match="set mirror.urls in server.yaml"):
            await admin.mirror_disk_usage()


async def test_an_add_from_the_hub_is_followed_to_the_pinned_revision(tmp_path, hub, start_mirror):
    gguf = write_gguf(tmp_path / "m.gguf").read_bytes()
    commit = hub.add_repo("google/gemma-3-270m-gguf", {"config.json": b"{}", "m.gguf": gguf})
    mirror = await start_mirror(upstream=hub.url)
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        seen = await _add(admin, source="hf:google/gemma-3-270m-gguf@main")
        shown = await admin.show_mirror_repo("google/gemma-3-270m-gguf", "main")
    assert seen[0].pull.state in ("queued", "resolving", "fetching")
    last = seen[-1]
    assert last.pull.state == "done" and last.pull.bytes_done == len(gguf) + 2
    assert last.revision.commit == commit and list(last.revision.refs) == ["main"]
    assert [f.path for f in shown.files] == ["config.json", "m.gguf"]
    assert shown.files[1].sha256 == hashlib.sha256(gguf).hexdigest()


async def test_a_detached_add_answers_at_once_with_the_pull(tmp_path, hub, start_mirror):
    hub.add_repo("org/tiny", {"config.json": b"{}"})
    mirror = await start_mirror(upstream=hub.url)
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        seen = await _add(admin, source="hf:org/tiny", detach=True)
        listed = await admin.list_mirrors()
    assert len(seen) == 1 and seen[0].pull.pull_id
    assert seen[0].pull.pull_id in [p.pull_id for p in listed.pulls]


async def test_a_failed_pull_ends_with_the_mirrors_words(tmp_path, hub, start_mirror):
    mirror = await start_mirror(upstream=hub.url)
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        seen = await _add(admin, source="hf:org/missing")
    assert seen[-1].pull.state == "failed"
    assert "org/missing" in seen[-1].pull.error


async def test_an_add_over_the_quota_is_refused_with_what_to_remove(tmp_path, hub, start_mirror):
    hub.add_repo("org/big", {"m.gguf": b"b" * 20_000})
    mirror = await start_mirror(upstream=hub.url, max_bytes=10_000)
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        seen = await _add(admin, source="hf:org/big")
    assert seen[-1].pull.state == "failed"
    assert "quota" in seen[-1].pull.error and "max_bytes" in seen[-1].pull.error


async def test_a_local_folder_is_read_by_gatewayd_and_uploaded_as_one_revision(tmp_path, mirror):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes(b"{}")
    (model / "model.safetensors").write_bytes(b"w" * 5000)
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        seen = await _add(admin, source=str(model), as_repo="org/local")
        shown = await admin.show_mirror_repo("org/local")
    assert seen[-1].pull.state == "done" and seen[-1].pull.bytes_done == 5002
    assert seen[-1].revision.repo == "org/local"
    assert [f.path for f in shown.files] == ["config.json", "model.safetensors"]
    assert shown.files[1].sha256 == hashlib.sha256(b"w" * 5000).hexdigest()
    # What the mirror holds is byte for byte what was on disk.
    held = mirror.store.file("org/local", shown.revisions[0].commit, "model.safetensors")
    assert held is not None and held[1].read_bytes() == b"w" * 5000


async def test_a_local_folder_without_a_repository_name_is_refused(tmp_path, mirror):
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        with pytest.raises(UsageError, match="--as org/name"):
            await _add(admin, source=str(tmp_path))


async def test_a_folder_of_wheels_is_put_wheel_by_wheel(tmp_path, mirror):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "a", "1.0")
    b = _wheel(wheels, "b", "2.0")
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        seen = await _add(admin, source=str(wheels), kind="wheel")
        one = await admin.show_mirror_repo("b-2.0-py3-none-any.whl")
    held = [p.revision.repo for p in seen if p.revision]
    assert held == ["a-1.0-py3-none-any.whl", "b-2.0-py3-none-any.whl"]
    assert one.revisions[0].kind == "wheel" and one.files[0].size_bytes == b.stat().st_size


async def test_each_wheel_added_is_pinned_by_the_sha256_the_control_plane_read(tmp_path, mirror):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    a, b = _wheel(wheels, "a", "1.0"), _wheel(wheels, "b", "2.0")
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        await _add(admin, source=str(wheels), kind="wheel")
        pins = load_pins(c.paths.mirror_pins_file).sha256s()
    assert pins == {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in (a, b)}


async def test_the_control_plane_writes_to_mirrors_with_their_own_admin_token(tmp_path, mirror):
    # Guards: gatewayd sent the cluster's admin token to every mirror it wrote to.
    read_file = tmp_path / "mirror-read-token"
    read_file.write_text(mirror.read_token + "\n")

    def configure(cfg):
        cfg.mirror.urls = [mirror.url]
        cfg.mirror.read_token_file = str(read_file)

    paths = Paths.under(tmp_path / "home")
    init_server(paths, hosts=["localhost"])
    paths.mirror_admin_token_file.write_text(mirror.admin_token + "\n")
    async with running_cluster(tmp_path, configure=configure) as c, c.admin() as admin:
        assert c.token != mirror.admin_token
        du = await admin.mirror_disk_usage()
    assert du.served_by == mirror.url


async def test_an_engine_archive_is_kept_by_its_pinned_sha256(tmp_path, mirror):
    archive = tmp_path / "llama-b1-bin-ubuntu-x64.zip"
    archive.write_bytes(b"PK an archive")
    sha = hashlib.sha256(b"PK an archive").hexdigest()
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        with pytest.raises(UsageError):
            await _add(admin, source=str(archive), kind="engine", sha256="0" * 64)
        seen = await _add(admin, source=str(archive), kind="engine", sha256=sha)
    assert seen[-1].revision.kind == "engine" and seen[-1].revision.commit == sha


async def test_show_names_one_revision_by_ref_or_commit_digits(tmp_path, mirror):
    old = mirror.put_model("org/tiny", {"x": b"1"}, refs=("v1",), added_unix=1000.0)
    new = mirror.put_model("org/tiny", {"x": b"22"}, refs=("main",), added_unix=2000.0)
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        every = await admin.show_mirror_repo("org/tiny")
        v1 = await admin.show_mirror_repo("org/tiny", "v1")
        by_digits = await admin.show_mirror_repo("org/tiny", new.commit[:12])
        with pytest.raises(NotFoundError, match="no revision 'v9'"):
            await admin.show_mirror_repo("org/tiny", "v9")
        with pytest.raises(NotFoundError, match="holds no org/absent"):
            await admin.show_mirror_repo("org/absent")
    assert [r.commit for r in every.revisions] == [new.commit, old.commit]
    assert [r.commit for r in v1.revisions] == [old.commit] and v1.files[0].size_bytes == 1
    assert [r.commit for r in by_digits.revisions] == [new.commit]


async def test_remove_du_and_peers_go_to_the_mirror(tmp_path, mirror):
    rev = mirror.put_model("org/tiny", {"x": b"1" * 10})
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        du = await admin.mirror_disk_usage()
        removed = await admin.remove_from_mirror("org/tiny", "main")
        added = await admin.add_mirror_peer("http://127.0.0.1:9")
        listed = await admin.list_mirror_peers()
        gone = await admin.remove_mirror_peer("http://127.0.0.1:9")
        after = await admin.list_mirrors()
    assert du.used_bytes == 10 and du.served_by == mirror.url and du.revisions[0].repo == "org/tiny"
    assert [r.commit for r in removed.removed] == [rev.commit]
    assert [p.url for p in added.peers] == ["http://127.0.0.1:9"] == [p.url for p in listed.peers]
    assert list(gone.peers) == []
    assert list(after.revisions) == []


async def test_a_mirror_refusing_gatewayds_token_is_told_in_plain_words(tmp_path, mirror):
    class Wrong:
        read_token, admin_token = mirror.read_token, "not-the-admin-token"

    async with cluster_with(tmp_path, Wrong, mirror.url) as c, c.admin() as admin:
        with pytest.raises(UsageError) as refused:
            await admin.mirror_disk_usage()
    assert f"{mirror.url} refused the control plane's token" in refused.value.message
    assert "mirror.admin_token_file" in refused.value.message


async def test_every_mirror_down_is_unavailable_naming_them(tmp_path, mirror):
    dead = _dead_url()
    async with cluster_with(tmp_path, mirror, dead) as c, c.admin() as admin:
        with pytest.raises(AdminUnreachable, match="no mirror answered"):
            await admin.mirror_disk_usage()
        listed = await admin.list_mirrors()
    assert listed.mirrors[0].state == "down" and listed.served_by == ""


async def test_ctl_model_plan_of_a_gguf_on_the_mirror_shows_its_real_size(
    tmp_path, mirror, gemma3_270m_gguf
):
    data = gemma3_270m_gguf.read_bytes()
    mirror.put_model("google/gemma-3-270m-gguf", {"gemma-3-270m-Q4_K_M.gguf": data})
    source = "hf:google/gemma-3-270m-gguf:gemma-3-270m-Q4_K_M.gguf"
    async with cluster_with(tmp_path, mirror, mirror.url) as c, c.admin() as admin:
        plan = await admin.plan_model(PlanModelRequest(source=source, engine="llama.cpp"))
        with pytest.raises(UsageError) as refused:
            await admin.plan_model(
                PlanModelRequest(source="hf:org/absent:m.gguf", engine="llama.cpp")
            )
    assert plan.facts.weights_bytes == len(data) and plan.facts.vocab_size == 262144
    assert not any("size is unknown" in n for n in plan.notes)
    assert "llmgw ctl mirror add hf:org/absent@main --include m.gguf" in refused.value.message
