"""Adding a model checks what its source names: hf: pinned to a commit, local paths for their format."""

from __future__ import annotations

import pytest

from gatewayd.catalog.catalog import Catalog, CatalogError
from gatewayd.nodes.watch import Broadcaster
from gatewayd.store import connect_store
from llmgw.config import StoreConfig
from llmgw.paths import Paths
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

REPO = make_tiny_repo()


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


@pytest.fixture
async def catalog(tmp_path, hub):
    store = await connect_store(
        StoreConfig(dsn=f"sqlite://{tmp_path / 'store' / 'llmgw.db'}"), Paths.under(tmp_path / "h")
    )
    yield Catalog(store, Broadcaster(), hub_url=hub.url)
    await store.close()


def _spec(source: str, engine: str = "vllm", **kw) -> dict:
    return {"name": "tiny", "source": source, "profiles": [{"engine": engine}], **kw}


async def test_an_hf_repository_is_pinned_to_the_commit_its_branch_names_when_added(catalog, hub):
    first = hub.add_repo("org/tiny", REPO.files)
    model = await catalog.put(_spec("hf:org/tiny"))
    assert model.commit == first and model.source == "hf:org/tiny"
    assert str(model.fetch_source) == f"hf:org/tiny@{first}"
    # The branch moves upstream; the model keeps its commit, even when put again.
    hub.commit("org/tiny", {"README.md": b"moved"})
    again = await catalog.put(_spec("hf:org/tiny", replicas_min=2, replicas_max=2))
    assert again.commit == first and catalog.get("tiny").commit == first


async def test_a_new_source_or_revision_is_pinned_afresh(catalog, hub):
    first = hub.add_repo("org/tiny", REPO.files)
    hub.set_ref("org/tiny", "v1", first)
    second = hub.commit("org/tiny", {"README.md": b"moved"})
    assert (await catalog.put(_spec("hf:org/tiny@v1"))).commit == first
    assert (await catalog.put(_spec("hf:org/tiny"))).commit == second


async def test_a_file_of_a_repository_is_pinned_and_must_exist(catalog, hub):
    commit = hub.add_repo("org/gguf", {"model.gguf": b"GGUF" + b"\0" * 100})
    model = await catalog.put(_spec("hf:org/gguf:model.gguf", engine="llama.cpp"))
    assert model.commit == commit
    assert str(model.fetch_source) == f"hf:org/gguf@{commit}:model.gguf"
    with pytest.raises(CatalogError, match="org/gguf has no file other.gguf"):
        await catalog.put(_spec("hf:org/gguf:other.gguf", engine="llama.cpp"))


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("hf:org/nope", "org/nope is not a repository on 127.0.0.1"),
        ("hf:org/tiny@v9", "org/tiny has no revision 'v9'"),
    ],
)
async def test_a_repository_or_revision_that_does_not_exist_is_refused_plainly(
    catalog, hub, source, words
):
    hub.add_repo("org/tiny", REPO.files)
    with pytest.raises(CatalogError, match=words) as e:
        await catalog.put(_spec(source))
    assert e.value.kind == "invalid" and catalog.get("tiny") is None


async def test_a_repository_without_a_config_or_safetensors_is_refused(catalog, hub):
    hub.add_repo("org/ggufs", {"model.gguf": b"GGUF", "README.md": b"x"})
    with pytest.raises(CatalogError, match="has no config.json"):
        await catalog.put(_spec("hf:org/ggufs"))
    hub.add_repo("org/old", {"config.json": b"{}", "pytorch_model.bin": b"x"})
    with pytest.raises(CatalogError, match="holds no safetensors weights"):
        await catalog.put(_spec("hf:org/old"))
    assert (await catalog.put(_spec("hf:org/old", allow_pickle=True))).commit


async def test_a_hub_that_does_not_answer_refuses_the_add_saying_where_it_looked(tmp_path):
    async with FakeHub() as gone:
        url = gone.url
    store = await connect_store(
        StoreConfig(dsn=f"sqlite://{tmp_path / 's.db'}"), Paths.under(tmp_path / "h")
    )
    try:
        catalog = Catalog(store, Broadcaster(), hub_url=url)
        with pytest.raises(CatalogError, match="cannot be pinned to a commit.*did not answer"):
            await catalog.put(_spec("hf:org/tiny"))
    finally:
        await store.close()


async def test_a_local_file_that_is_not_weights_is_refused_saying_what_it_is_not(catalog):
    # Regression: `llmgw ctl model serve /etc/passwd --name x` was accepted and
    # its replica failed over and over in llama.cpp's log lines.
    with pytest.raises(CatalogError) as e:
        await catalog.put(_spec("/etc/passwd", engine="llama.cpp", name="x"))
    assert e.value.message.startswith(
        "/etc/passwd is neither a GGUF file (no GGUF magic) nor a safetensors file"
    )


async def test_local_weights_of_each_format_are_accepted(catalog, tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    assert (await catalog.put(_spec(str(gguf), engine="llama.cpp"))).source == str(gguf)
    shard = tmp_path / "one.safetensors"
    shard.write_bytes(REPO.files[REPO.shards[0]])
    await catalog.put(_spec(str(shard)))
    d = REPO.write(tmp_path / "tiny")
    await catalog.put(_spec(str(d)))
    (tmp_path / "bad.gguf").write_bytes(b"GGML")
    with pytest.raises(CatalogError, match="is not a GGUF file .no GGUF magic."):
        await catalog.put(_spec(str(tmp_path / "bad.gguf"), engine="llama.cpp"))
    with pytest.raises(CatalogError, match="without config.json"):
        await catalog.put(_spec(str(tmp_path)))


async def test_the_sim_and_paths_only_nodes_have_are_not_checked_here(catalog, tmp_path):
    # The sim loads no weights; a path the control plane cannot see is the node's to check.
    await catalog.put(_spec("/etc/passwd", engine="sim", name="s"))
    await catalog.put(_spec(str(tmp_path / "on-the-node.gguf"), engine="llama.cpp", name="n"))
    assert catalog.names() == ["n", "s"]
