"""The mirror's management API (/v1/…): every endpoint, with the wire models both sides use."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest
from huggingface_hub import snapshot_download

from llmgw.mirror.wire import (
    Du,
    ErrorBody,
    FileEntry,
    Health,
    Info,
    PeerList,
    Pull,
    PullList,
    Removed,
    Revision,
    RevisionList,
    State,
)
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo
from tests.mirrord.api.test_http_files import make_wheel


def _error(r: httpx.Response, status: int, code: str) -> ErrorBody:
    assert r.status_code == status, r.text
    body = ErrorBody.model_validate(r.json())
    assert body.error.code == code
    return body


async def test_health_needs_no_credential(mirror):
    async with httpx.AsyncClient(base_url=mirror.url) as c:
        r = await c.get("/health")
    h = Health.model_validate(r.json())
    assert h.ok and h.mirror_id == mirror.store.mirror_id


async def test_info_counts_what_is_held(mirror):
    mirror.put_model("org/a", {"config.json": b"{}"})
    async with mirror.client() as c:
        info = Info.model_validate((await c.get("/v1/info")).json())
    assert info.revisions == 1 and info.used_bytes == 2 and info.free_disk_bytes > 0


async def test_revisions_are_listed_without_files_and_a_repo_with_them(mirror):
    rev = mirror.put_model("org/a", {"config.json": b"{}", "w.safetensors": b"x" * 10})
    async with mirror.client() as c:
        listing = RevisionList.model_validate((await c.get("/v1/revisions")).json())
        repo = RevisionList.model_validate((await c.get("/v1/repos/org/a")).json())
        missing = await c.get("/v1/repos/org/none")
    assert [(r.repo, r.commit, r.files) for r in listing.revisions] == [("org/a", rev.commit, None)]
    assert repo.revisions[0].refs == ["main"]
    assert sorted(f.path for f in repo.revisions[0].files) == ["config.json", "w.safetensors"]
    assert "llmgw ctl mirror add hf:org/none" in _error(missing, 404, "not_found").error.hint


async def test_removing_a_revision_takes_the_admin_token(mirror):
    rev = mirror.put_model("org/a", {"config.json": b"{}"})
    async with mirror.client() as reader:
        refused = await reader.delete("/v1/repos/org/a")
    _error(refused, 403, "forbidden")
    async with httpx.AsyncClient(base_url=mirror.url) as anyone:
        _error(await anyone.delete("/v1/repos/org/a"), 401, "unauthorized")
    async with mirror.client(admin=True) as admin:
        r = await admin.delete("/v1/repos/org/a", params={"revision": rev.commit})
        again = await admin.delete("/v1/repos/org/a")
    removed = Removed.model_validate(r.json())
    assert [x.commit for x in removed.removed] == [rev.commit] and removed.freed_bytes == 2
    _error(again, 404, "not_found")
    assert mirror.store.removals()[0].commit == rev.commit


async def test_an_upload_a_file_at_a_time_then_committed_is_served_to_huggingface_hub(
    mirror, tmp_path
):
    tiny = make_tiny_repo()
    async with mirror.client(admin=True) as c:
        for path, data in tiny.files.items():
            r = await c.put(
                f"/v1/uploads/up1/{path}",
                content=data,
                headers={"X-Llmgw-Sha256": hashlib.sha256(data).hexdigest()},
            )
            assert r.status_code == 201, r.text
            assert FileEntry.model_validate(r.json()).size == len(data)
        r = await c.post("/v1/uploads/up1/commit", json={"repo": "local/tiny"})
    assert r.status_code == 201, r.text
    rev = Revision.model_validate(r.json())
    assert rev.file_count == len(tiny.files) and rev.refs == ["main"]
    out = await asyncio.to_thread(
        snapshot_download,
        "local/tiny",
        endpoint=mirror.url,
        token=mirror.read_token,
        cache_dir=tmp_path / "hf",
    )
    for path, data in tiny.files.items():
        assert Path(out, path).read_bytes() == data


async def test_an_upload_with_the_wrong_digest_is_refused(mirror):
    async with mirror.client(admin=True) as c:
        r = await c.put(
            "/v1/uploads/up2/config.json", content=b"{}", headers={"X-Llmgw-Sha256": "0" * 64}
        )
        bad = await c.put(
            "/v1/uploads/up2/config.json", content=b"{}", headers={"X-Llmgw-Sha256": "xyz"}
        )
    _error(r, 400, "invalid")
    _error(bad, 400, "invalid")


async def test_a_wheel_put_whole_is_listed_read_and_removed(mirror):
    name, data = make_wheel("pkg", "1.0")
    async with mirror.client(admin=True) as admin, mirror.client() as c:
        put = await admin.put(f"/v1/files/wheel/{name}", content=data)
        got = await c.get(f"/v1/files/wheel/{name}")
        served = await c.get(f"/files/wheel/{name}")
        gone = await admin.delete(f"/v1/files/wheel/{name}")
        after = await c.get(f"/v1/files/wheel/{name}")
    assert put.status_code == 201, put.text
    rev = Revision.model_validate(got.json())
    assert rev.kind == "wheel" and rev.commit == hashlib.sha256(data).hexdigest()
    assert served.content == data
    assert Removed.model_validate(gone.json()).removed[0].repo == name
    _error(after, 404, "not_found")


async def test_an_engine_archive_put_without_its_sha256_is_refused(mirror):
    async with mirror.client(admin=True) as c:
        r = await c.put("/v1/files/engine/llama.zip", content=b"zip")
    assert "sha256" in _error(r, 400, "invalid").error.message


async def test_an_upload_past_the_quota_is_507_naming_what_to_remove(start_mirror):
    mirror = await start_mirror(max_bytes=1000)
    mirror.put_model("org/old", {"w.safetensors": b"x" * 900})
    async with mirror.client(admin=True) as c:
        await c.put("/v1/uploads/u/w.safetensors", content=os.urandom(500))
        r = await c.post("/v1/uploads/u/commit", json={"repo": "org/new"})
    body = _error(r, 507, "quota")
    assert "org/old" in body.error.message + body.error.hint


async def test_a_pull_from_a_hub_is_followed_to_done_and_then_served(start_mirror, tmp_path):
    tiny = make_tiny_repo()
    async with FakeHub() as hub:
        commit = hub.add_repo("org/tiny", tiny.files)
        mirror = await start_mirror(upstream=hub.url)
        async with mirror.client(admin=True, timeout=60) as c:
            r = await c.post("/v1/pulls", json={"source": "hf:org/tiny@main"})
            assert r.status_code == 202, r.text
            pull = Pull.model_validate(r.json())
            lines = []
            async with c.stream("GET", f"/v1/pulls/{pull.pull_id}/follow") as s:
                assert s.headers["content-type"] == "application/x-ndjson"
                async for line in s.aiter_lines():
                    lines.append(Pull.model_validate(json.loads(line)))
            listed = PullList.model_validate((await c.get("/v1/pulls")).json())
            one = Pull.model_validate((await c.get(f"/v1/pulls/{pull.pull_id}")).json())
            unknown = await c.get("/v1/pulls/nope")
    assert lines[-1].state == "done", lines[-1].error
    assert lines[-1].revision.commit == commit
    assert [p.pull_id for p in listed.pulls] == [pull.pull_id] and one.state == "done"
    _error(unknown, 404, "not_found")
    out = await asyncio.to_thread(
        snapshot_download,
        "org/tiny",
        endpoint=mirror.url,
        token=mirror.read_token,
        cache_dir=tmp_path / "hf",
    )
    assert os.path.basename(out) == commit


async def test_a_pull_that_is_not_well_formed_is_400(mirror):
    async with mirror.client(admin=True) as c:
        r = await c.post("/v1/pulls", content=b"not json")
        wheel = await c.post("/v1/pulls", json={"source": "x.whl", "kind": "wheel"})
    _error(r, 400, "invalid")
    _error(wheel, 400, "refused")


async def test_pulls_and_du_take_the_admin_token(mirror):
    async with mirror.client() as c:
        _error(await c.get("/v1/pulls"), 403, "forbidden")
        _error(await c.get("/v1/du"), 403, "forbidden")
        _error(await c.get("/v1/peers"), 403, "forbidden")


async def test_du_counts_bytes_and_state_lists_revisions_and_tombstones(mirror):
    keep = mirror.put_model("org/a", {"w.safetensors": b"a" * 100})
    gone = mirror.put_model("org/b", {"w.safetensors": b"b" * 50})
    mirror.store.remove("model", "org/b")
    async with mirror.client(admin=True) as c:
        du = Du.model_validate((await c.get("/v1/du")).json())
    async with mirror.client() as c:
        state = State.model_validate((await c.get("/v1/state")).json())
    assert du.used_bytes == 100 and [r.repo for r in du.revisions] == ["org/a"]
    assert [r.commit for r in state.revisions] == [keep.commit]
    assert state.revisions[0].files is not None
    assert [t.commit for t in state.removed] == [gone.commit]


async def test_peers_are_added_listed_and_removed(mirror):
    async with mirror.client(admin=True) as c:
        added = await c.post("/v1/peers", json={"url": "http://127.0.0.1:9"})
        listed = PeerList.model_validate((await c.get("/v1/peers")).json())
        bad = await c.post("/v1/peers", json={"url": "ftp://x"})
        removed = await c.delete("/v1/peers", params={"url": "http://127.0.0.1:9"})
        nameless = await c.delete("/v1/peers")
    assert added.status_code == 200, added.text
    assert [p.url for p in listed.peers] == ["http://127.0.0.1:9"]
    _error(bad, 400, "invalid")
    assert PeerList.model_validate(removed.json()).peers == []
    _error(nameless, 400, "invalid")


async def test_a_notify_from_a_peer_takes_the_read_token(mirror):
    async with mirror.client() as c:
        r = await c.post("/v1/notify", json={})
    assert r.status_code == 200 and r.json() == {}


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/nothing"), ("POST", "/v1/info"), ("GET", "/elsewhere")]
)
async def test_an_unknown_endpoint_is_404_in_the_wire_shape(mirror, method, path):
    async with mirror.client(admin=True) as c:
        r = await c.request(method, path)
    _error(r, 404, "not_found")


async def test_a_bad_name_is_refused_before_it_becomes_a_path(mirror):
    async with mirror.client(admin=True) as c:
        r = await c.delete("/v1/repos/org/.hidden")
        dotted = await c.put("/v1/uploads/.x/config.json", content=b"{}")
    _error(r, 400, "invalid")
    _error(dotted, 400, "invalid")
