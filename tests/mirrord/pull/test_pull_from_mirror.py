"""A pull from another mirror (the same hub API, with its read token), and a pull through a
running mirror's management API with its progress followed."""

from __future__ import annotations

import json

import pytest

from llmgw.mirror.wire import Pull, PullRequest
from mirrord.pull import Puller, PullJob
from mirrord.store import MirrorStore
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

TINY = make_tiny_repo()


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def test_an_add_through_the_api_is_followed_to_done_and_held(hub, start_mirror):
    commit = hub.add_repo("org/tiny", TINY.files)
    a = await start_mirror(upstream=hub.url)
    async with a.client(admin=True) as c:
        started = await c.post("/v1/pulls", json={"source": "hf:org/tiny"})
        assert started.status_code == 202
        pull_id = started.json()["pull_id"]
        async with c.stream("GET", f"/v1/pulls/{pull_id}/follow") as resp:
            lines = [Pull.model_validate(json.loads(x)) async for x in resp.aiter_lines() if x]
    assert lines[-1].state == "done" and lines[-1].commit == commit
    assert a.store.find("org/tiny", "main").commit == commit


async def test_a_mirror_pulls_from_another_mirror_the_same_commit_and_bytes(
    hub, start_mirror, tmp_path
):
    commit = hub.add_repo("org/tiny", TINY.files)
    a = await start_mirror(upstream=hub.url)
    async with a.client(admin=True) as c:
        pull_id = (await c.post("/v1/pulls", json={"source": "hf:org/tiny"})).json()["pull_id"]
        async with c.stream("GET", f"/v1/pulls/{pull_id}/follow") as resp:
            async for _ in resp.aiter_lines():
                pass
        # An upload's small files carry no git blob id: the mirror lists them by sha256.
        for path, data in {"config.json": b'{"local": 1}', "w.gguf": b"w" * 3000}.items():
            r = await c.put(f"/v1/uploads/u1/{path}", content=data)
            assert r.status_code == 201
        uploaded = (await c.post("/v1/uploads/u1/commit", json={"repo": "local/w"})).json()

    b = MirrorStore(tmp_path / "b")
    puller = Puller(b, upstream=a.url, upstream_token=a.read_token, backoff_s=0)
    try:
        rev = await puller.pull(PullRequest(source="hf:org/tiny"), PullJob("1", "hf:org/tiny"))
        up = await puller.pull(PullRequest(source="hf:local/w"), PullJob("2", "hf:local/w"))
    finally:
        await puller.aclose()
    assert rev.commit == commit
    for path, data in TINY.files.items():
        assert b.file("org/tiny", commit, path)[1].read_bytes() == data
    assert up.commit == uploaded["commit"]
    assert b.file("local/w", up.commit, "config.json")[1].read_bytes() == b'{"local": 1}'
