"""hf: models pinned and planned through the cluster's mirrors (real mirror daemons), first up first."""

from __future__ import annotations

import socket

import pytest

from gatewayd.catalog.catalog import Catalog, CatalogError
from gatewayd.controller.sizing import Sizing
from gatewayd.mirrors.hub import NotOnMirror
from gatewayd.mirrors.set import MirrorSet
from gatewayd.nodes.watch import Broadcaster
from gatewayd.store import SqliteStore
from llmgw.catalog import Model
from llmgw.mirror.config import MirrorsConfig
from llmgw.modelplan.gguf_meta import read_gguf
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo
from tests.llmgw.modelplan.test_gguf_meta import write_gguf

REPO = make_tiny_repo()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _set(token: str, *urls: str) -> MirrorSet:
    return MirrorSet(MirrorsConfig(urls=list(urls)), read_token=token)


def _gguf_model(source: str, commit: str = "", **kw) -> Model:
    return Model(name="m", source=source, commit=commit, profiles=[{"engine": "llama.cpp"}], **kw)


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


async def test_a_gguf_of_a_mirror_is_planned_from_its_header_with_its_real_size(
    mirror, hub, tmp_path
):
    local = write_gguf(tmp_path / "m.gguf")
    rev = mirror.put_model("org/m", {"m.gguf": local.read_bytes()})
    mirrors = _set(mirror.read_token, mirror.url)
    try:
        sizing = Sizing(hub_url=hub.url, mirrors=mirrors)
        model = _gguf_model("hf:org/m:m.gguf", rev.commit)
        facts = await sizing.learn(model, strict=True)
        plan = sizing.plan(model, model.profiles[0])
    finally:
        await mirrors.aclose()
    assert facts == read_gguf(local)
    assert facts.weights_bytes == local.stat().st_size
    assert not any("size is unknown" in n for n in plan.notes)
    assert hub.requests == []  # the internet's hub is never asked


async def test_a_repository_is_planned_through_the_first_mirror_that_answers(mirror, hub):
    mirror.put_model("org/tiny", REPO.files)
    mirrors = _set(mirror.read_token, _dead_url(), mirror.url)
    try:
        sizing = Sizing(hub_url=hub.url, mirrors=mirrors)
        model = Model(name="t", source="hf:org/tiny@main", profiles=[{"engine": "vllm"}])
        facts = await sizing.learn(model, strict=True)
    finally:
        await mirrors.aclose()
    assert facts.parameters == REPO.parameters and facts.weights_bytes == REPO.weights_bytes
    assert hub.requests == []


async def test_none_of_the_mirrors_holding_it_is_refused_with_the_command_that_adds_it(mirror, hub):
    hub.add_repo("org/absent", REPO.files)  # on the hub, but the model may not go there
    mirrors = _set(mirror.read_token, mirror.url)
    try:
        sizing = Sizing(hub_url=hub.url, mirrors=mirrors)
        model = Model(name="t", source="hf:org/absent", profiles=[{"engine": "vllm"}])
        with pytest.raises(NotOnMirror) as refused:
            await sizing.learn(model, strict=True)
        # In the background the plan says why it is sized from its profile.
        assert await sizing.learn(model) is None
        plan = sizing.plan(model, model.profiles[0])
    finally:
        await mirrors.aclose()
    assert "llmgw ctl mirror add hf:org/absent@main" in refused.value.message
    assert "allow_internet" in refused.value.hint
    assert any(
        "(the mirrors: none of the cluster's mirrors holds org/absent@main" in n
        and "llmgw ctl mirror add hf:org/absent@main" in n
        for n in plan.notes
    )
    assert hub.requests == []


async def test_a_model_allowed_the_internet_uses_the_hub_when_no_mirror_holds_it(mirror, hub):
    commit = hub.add_repo("org/tiny", REPO.files)
    mirrors = _set(mirror.read_token, mirror.url)
    try:
        sizing = Sizing(hub_url=hub.url, mirrors=mirrors)
        model = Model(
            name="t",
            source="hf:org/tiny",
            commit=commit,
            allow_internet=True,
            profiles=[{"engine": "vllm"}],
        )
        facts = await sizing.learn(model, strict=True)
    finally:
        await mirrors.aclose()
    assert facts.parameters == REPO.parameters


async def _catalog(tmp_path, hub_url: str, mirrors: MirrorSet) -> Catalog:
    store = SqliteStore(tmp_path / "gw.db")
    await store.open()
    return Catalog(store, Broadcaster(), hub_url=hub_url, mirrors=mirrors)


async def test_an_hf_model_is_pinned_to_the_commit_the_mirror_holds(mirror, hub, tmp_path):
    # The hub's main has moved on since the mirror pulled it: the mirror's commit is pinned.
    hub.add_repo("org/m", {"m.gguf": b"newer"})
    rev = mirror.put_model("org/m", {"m.gguf": write_gguf(tmp_path / "m.gguf").read_bytes()})
    mirrors = _set(mirror.read_token, mirror.url)
    try:
        catalog = await _catalog(tmp_path, hub.url, mirrors)
        model = await catalog.put(_gguf_model("hf:org/m@main:m.gguf").model_dump())
        with pytest.raises(CatalogError) as refused:
            await catalog.put(
                _gguf_model("hf:org/m@main:other.gguf")
                .model_copy(update={"name": "o"})
                .model_dump()
            )
    finally:
        await mirrors.aclose()
    assert model.commit == rev.commit
    assert refused.value.kind == "invalid"
    assert "none of the cluster's mirrors holds other.gguf of org/m@main" in refused.value.message
    assert "llmgw ctl mirror add hf:org/m@main --include other.gguf" in refused.value.message
    assert hub.requests == []
