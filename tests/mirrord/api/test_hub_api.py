"""The mirror's Hugging Face API as huggingface_hub 2.x itself uses it (no Xet, plain HTTP)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.mirrord.conftest import git_blob_oid

CONFIG = b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}'
WEIGHTS = os.urandom(3 << 20)
FILES = {
    "config.json": CONFIG,
    "tokenizer/tokenizer.json": b'{"model": {}}',
    "model.safetensors": WEIGHTS,
    "README.md": b"# tiny\n",
}


@pytest.fixture
def held(mirror):
    return mirror.put_model("org/tiny", FILES)


def _dl(fn, *args, **kw):
    return asyncio.to_thread(fn, *args, **kw)


async def test_snapshot_download_gives_the_files_byte_for_byte(mirror, held, tmp_path):
    out = await _dl(
        snapshot_download,
        "org/tiny",
        endpoint=mirror.url,
        token=mirror.read_token,
        cache_dir=tmp_path / "hf",
    )
    for path, data in FILES.items():
        assert Path(out, path).read_bytes() == data
    # The snapshot is named by the commit the mirror pinned.
    assert os.path.basename(out) == held.commit


async def test_hf_hub_download_of_a_file_at_a_commit_and_at_main(mirror, held, tmp_path):
    at_main = await _dl(
        hf_hub_download,
        "org/tiny",
        "model.safetensors",
        endpoint=mirror.url,
        token=mirror.read_token,
        cache_dir=tmp_path / "a",
    )
    at_commit = await _dl(
        hf_hub_download,
        "org/tiny",
        "tokenizer/tokenizer.json",
        revision=held.commit,
        endpoint=mirror.url,
        token=mirror.read_token,
        cache_dir=tmp_path / "b",
    )
    assert Path(at_main).read_bytes() == WEIGHTS
    assert Path(at_commit).read_bytes() == FILES["tokenizer/tokenizer.json"]


async def test_the_hf_cli_downloads_from_the_mirror_with_hf_endpoint(mirror, held, tmp_path):
    env = {
        **os.environ,
        "HF_ENDPOINT": mirror.url,
        "HF_TOKEN": mirror.read_token,
        "HF_HOME": str(tmp_path / "home"),
    }
    proc = await asyncio.create_subprocess_exec(
        os.path.join(os.path.dirname(sys.executable), "hf"),
        "download",
        "org/tiny",
        "--local-dir",
        str(tmp_path / "out"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    for path, data in FILES.items():
        assert (tmp_path / "out" / path).read_bytes() == data


async def test_model_info_carries_the_commit_and_siblings_with_sizes(mirror, held):
    api = HfApi(endpoint=mirror.url, token=mirror.read_token)
    info = await _dl(api.model_info, "org/tiny", files_metadata=True)
    assert info.sha == held.commit and info.id == "org/tiny"
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes == {p: len(d) for p, d in FILES.items()}
    lfs = {s.rfilename: s.lfs for s in info.siblings if s.lfs}
    assert list(lfs) == ["model.safetensors"]
    assert lfs["model.safetensors"].sha256 == _sha(WEIGHTS)


async def test_the_tree_lists_directories_and_recursive_lists_every_file(mirror, held):
    api = HfApi(endpoint=mirror.url, token=mirror.read_token)
    top = await _dl(lambda: list(api.list_repo_tree("org/tiny")))
    every = await _dl(lambda: list(api.list_repo_tree("org/tiny", recursive=True)))
    sub = await _dl(lambda: list(api.list_repo_tree("org/tiny", path_in_repo="tokenizer")))
    assert sorted(e.path for e in top) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "tokenizer",
    ]
    assert sorted(e.path for e in every) == sorted([*FILES, "tokenizer"])
    assert [e.path for e in sub] == ["tokenizer/tokenizer.json"]
    by_path = {e.path: e for e in every}
    # The hub's ids: a small file's git blob id; an LFS file's sha256 under lfs.
    assert by_path["config.json"].blob_id == git_blob_oid(CONFIG)
    assert by_path["model.safetensors"].lfs.sha256 == _sha(WEIGHTS)


async def test_a_long_tree_is_paginated_with_link_and_huggingface_hub_reads_every_page(
    mirror,
):
    files = {f"shards/part-{i:05d}.txt": b"%d" % i for i in range(2500)}
    mirror.put_model("org/many", files)
    async with mirror.client() as c:
        first = await c.get("/api/models/org/many/tree/main", params={"recursive": "true"})
    assert len(first.json()) == 1000 and 'rel="next"' in first.headers["link"]
    api = HfApi(endpoint=mirror.url, token=mirror.read_token)
    every = await _dl(lambda: list(api.list_repo_tree("org/many", recursive=True)))
    assert sorted(e.path for e in every if e.path != "shards") == sorted(files)


async def test_paths_info_answers_the_paths_asked(mirror, held):
    api = HfApi(endpoint=mirror.url, token=mirror.read_token)
    got = await _dl(api.get_paths_info, "org/tiny", ["config.json", "tokenizer", "missing.bin"])
    assert [(type(e).__name__, e.path) for e in got] == [
        ("RepoFile", "config.json"),
        ("RepoFolder", "tokenizer"),
    ]


async def test_a_head_of_resolve_carries_what_huggingface_hub_needs(mirror, held):
    async with mirror.client() as c:
        big = await c.head("/org/tiny/resolve/main/model.safetensors")
        small = await c.head(f"/org/tiny/resolve/{held.commit}/config.json")
    assert big.status_code == 200
    assert big.headers["x-repo-commit"] == held.commit
    assert big.headers["etag"] == f'"{_sha(WEIGHTS)}"'
    assert big.headers["x-linked-etag"] == f'"{_sha(WEIGHTS)}"'
    assert big.headers["x-linked-size"] == str(len(WEIGHTS))
    assert big.headers["content-length"] == str(len(WEIGHTS))
    assert big.headers["accept-ranges"] == "bytes"
    assert big.headers["content-type"] == "application/octet-stream"
    assert small.headers["etag"] == f'"{git_blob_oid(CONFIG)}"'
    assert "x-linked-etag" not in small.headers
    # No Xet header ever: it would switch the client away from us.
    for r in (big, small):
        assert not [h for h in r.headers if h.lower().startswith("x-xet")]
        assert "xet" not in r.headers.get("link", "")


async def test_huggingface_hub_metadata_reads_the_head(mirror, held):
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url("org/tiny", "model.safetensors", endpoint=mirror.url)
    meta = await _dl(get_hf_file_metadata, url, token=mirror.read_token)
    assert (meta.commit_hash, meta.etag, meta.size) == (held.commit, _sha(WEIGHTS), len(WEIGHTS))


async def test_a_ref_with_a_slash_is_read_quoted(mirror):
    rev = mirror.put_model("org/pr", {"config.json": b"{}"}, refs=("refs/pr/1",))
    api = HfApi(endpoint=mirror.url, token=mirror.read_token)
    info = await _dl(api.model_info, "org/pr", revision="refs/pr/1")
    assert info.sha == rev.commit


async def test_the_refs_held_are_listed_as_the_hub_lists_them(mirror, held):
    pr = mirror.put_model("org/tiny", {"config.json": b"{}"}, refs=("refs/pr/1",))
    api = HfApi(endpoint=mirror.url, token=mirror.read_token)
    refs = await _dl(api.list_repo_refs, "org/tiny", include_pull_requests=True)
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", held.commit)]
    assert [(p.ref, p.target_commit) for p in refs.pull_requests] == [("refs/pr/1", pr.commit)]


async def test_unknown_repo_revision_and_file_raise_the_hub_errors(mirror, held, tmp_path):
    kw = {"endpoint": mirror.url, "token": mirror.read_token, "cache_dir": tmp_path / "c"}
    with pytest.raises(RepositoryNotFoundError):
        await _dl(hf_hub_download, "org/nothing", "config.json", **kw)
    with pytest.raises(RevisionNotFoundError):
        await _dl(hf_hub_download, "org/tiny", "config.json", revision="v9", **kw)
    with pytest.raises(EntryNotFoundError):
        await _dl(hf_hub_download, "org/tiny", "nope.json", **kw)
    with pytest.raises(RepositoryNotFoundError):
        await _dl(snapshot_download, "org/nothing", **kw)
    with pytest.raises(RevisionNotFoundError):
        await _dl(snapshot_download, "org/tiny", revision="v9", **kw)


async def test_no_credential_is_refused_and_not_taken_for_a_missing_repo(mirror, held, tmp_path):
    # Guards: a bare 401 made huggingface_hub say "Repository Not Found",
    # sending people after the repository rather than the token.
    api = HfApi(endpoint=mirror.url, token=False)
    with pytest.raises(HfHubHTTPError) as e:
        await _dl(api.model_info, "org/tiny")
    assert not isinstance(e.value, RepositoryNotFoundError)
    assert e.value.response.status_code == 401
    assert "read token" in str(e.value)
    async with httpx.AsyncClient(base_url=mirror.url) as c:
        bare = await c.get("/org/tiny/resolve/main/config.json")
        wrong = await c.get(
            "/org/tiny/resolve/main/config.json", headers={"Authorization": "Bearer nope"}
        )
    assert bare.status_code == 401 and "www-authenticate" in bare.headers
    assert wrong.status_code == 403


async def test_the_admin_token_reads_nothing_and_whoami_answers_the_reader(mirror, held):
    # Guards: the admin token read too, so clients sent it where the read token would do.
    api = HfApi(endpoint=mirror.url, token=mirror.admin_token)
    with pytest.raises(HfHubHTTPError) as e:
        await _dl(api.model_info, "org/tiny")
    assert e.value.response.status_code == 403
    me = await _dl(HfApi(endpoint=mirror.url, token=mirror.read_token).whoami)
    assert me["auth"]["accessToken"]["role"] == "read"


async def test_basic_auth_with_the_token_as_password_reads(mirror, held):
    async with httpx.AsyncClient(base_url=mirror.url, auth=("llmgw", mirror.read_token)) as c:
        r = await c.get("/org/tiny/resolve/main/config.json")
    assert r.status_code == 200 and r.content == CONFIG


async def test_a_dataset_is_not_held(mirror):
    api = HfApi(endpoint=mirror.url, token=mirror.read_token)
    with pytest.raises(RepositoryNotFoundError):
        await _dl(api.dataset_info, "org/tiny")


async def test_a_name_that_leaves_the_repository_is_not_found(mirror, held):
    async with mirror.client() as c:
        up = await c.get("/org/tiny/resolve/main/..%2F..%2Fmirror-id")
        dotted = await c.get("/api/models/org/.hidden")
    assert up.status_code == 404 and up.headers["x-error-code"] == "EntryNotFound"
    assert dotted.status_code == 404 and dotted.headers["x-error-code"] == "RepoNotFound"


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
