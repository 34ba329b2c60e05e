"""hf: weights fetched from the cluster's mirrors in order, a file cut on one finished on the next.

Two fake hubs on loopback play two mirrors holding the same repository (and
taking the read token), a third the internet's hub; each test cuts, stalls or
breaks one of them and checks what the node did and what it asked of whom.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import ssl

import pytest

from agentd.shards import ShardRunner
from agentd.weights import ChecksumMismatch, DownloadFailed, WeightsFetcher
from agentd.weights.errors import MirrorsLack
from agentd.weights.sources import mirror_tls
from llmgw.errors import LlmgwError
from llmgw.tls import pki
from proto.llmgw.v1 import StartShard, WeightsSource
from tests.fakes.hub import FakeHub, HubFile
from tests.fakes.tiny_repo import make_tiny_repo

TOKEN = "read-token-7f3a"
# 2 MiB and a bit, opening with the GGUF magic: one LFS file, its sha256 the ETag everywhere.
GGUF = b"GGUF" + os.urandom(2 * 1024 * 1024 + 1234)
GGUF_SHA = hashlib.sha256(GGUF).hexdigest()
HALF = len(GGUF) // 2
REPO = make_tiny_repo()
SHARD = REPO.shards[0]


@pytest.fixture
async def mirrors():
    """Two mirrors holding org/gguf and org/tiny at the same commits, taking TOKEN."""
    async with FakeHub() as m1, FakeHub() as m2:
        for m in (m1, m2):
            m.require_token(TOKEN)
        yield m1, m2


@pytest.fixture
async def hub():
    """The internet's hub: asked only where a model may reach the internet."""
    async with FakeHub() as h:
        yield h


def _add(hubs, repo: str, files: dict[str, bytes]) -> str:
    """The same repository on each hub, at one commit (fresh fakes make the same id)."""
    (commit,) = {h.add_repo(repo, files) for h in hubs}
    return commit


def _fetcher(tmp_path, hub, **kw) -> WeightsFetcher:
    kw = {"retries": 0, "retry_backoff_s": 0.0, "progress_every_s": 0.0, **kw}
    return WeightsFetcher(tmp_path / "weights", hf_base_url=hub.url, **kw)


def _mirrored(m1, m2, **kw) -> dict:
    return {"mirror_urls": [m1.url, m2.url], "mirror_token": TOKEN, **kw}


async def test_a_file_cut_on_the_first_mirror_at_half_is_finished_from_the_second_at_that_byte(
    tmp_path, mirrors, hub
):
    # Guards the node that started a 100 GB file over on the second mirror
    # when the first died at 99 GB.
    m1, m2 = mirrors
    commit = _add(mirrors, "org/gguf", {"model.gguf": GGUF})
    m1.cut("org/gguf", "model.gguf", after_bytes=HALF)
    heard: list[str] = []

    got = await _fetcher(tmp_path, hub).ensure(
        "gemma",
        f"hf:org/gguf@{commit}:model.gguf",
        sha256=GGUF_SHA,
        on_origin=heard.append,
        **_mirrored(m1, m2),
    )

    assert got.path.read_bytes() == GGUF and got.sha256 == GGUF_SHA and got.downloaded
    (first,) = m1.downloads("org/gguf", "model.gguf")
    (rest,) = m2.downloads("org/gguf", "model.gguf")
    assert "range" not in first.headers
    assert rest.headers["range"] == f"bytes={HALF}-"
    # The rest only if it is the same file: the sha256, the ETag on every mirror.
    assert rest.headers["if-range"] == f'"{GGUF_SHA}"'
    assert heard == [f"mirror {m1.url[7:]}", f"mirror {m2.url[7:]}"]
    assert hub.requests == []


async def test_a_mirror_that_stalls_mid_file_is_left_for_the_next_at_the_byte_reached(
    tmp_path, mirrors, hub
):
    # Guards the node that waited forever on a mirror whose disk hung.
    m1, m2 = mirrors
    commit = _add(mirrors, "org/gguf", {"model.gguf": GGUF})
    m1.stall("org/gguf", "model.gguf", after_bytes=HALF)

    got = await _fetcher(tmp_path, hub, timeout_s=0.5).ensure(
        "gemma", f"hf:org/gguf@{commit}:model.gguf", sha256=GGUF_SHA, **_mirrored(m1, m2)
    )

    assert got.path.read_bytes() == GGUF
    (rest,) = m2.downloads("org/gguf", "model.gguf")
    assert rest.headers["range"] == f"bytes={HALF}-"


async def test_a_mirror_answering_a_server_error_is_passed_for_the_next(tmp_path, mirrors, hub):
    m1, m2 = mirrors
    commit = _add(mirrors, "org/gguf", {"model.gguf": GGUF})
    m1.fail("org/gguf", "model.gguf", status=503)

    got = await _fetcher(tmp_path, hub).ensure(
        "gemma", f"hf:org/gguf@{commit}:model.gguf", **_mirrored(m1, m2)
    )

    assert got.path.read_bytes() == GGUF
    assert len(m2.downloads("org/gguf", "model.gguf")) == 1


async def test_a_mirror_that_sends_another_file_under_the_name_starts_it_over_never_splices(
    tmp_path, mirrors, hub
):
    # Guards bytes of two different files joined at the cut: a mirror whose
    # file is not the one begun answers If-Range with the whole of its own.
    m1, m2 = mirrors
    commit = _add(mirrors, "org/gguf", {"model.gguf": GGUF})
    other = b"GGUF" + os.urandom(len(GGUF) - 4)
    m2.repos["org/gguf"].commits[commit] = {"model.gguf": HubFile("model.gguf", other, lfs=True)}
    m1.cut("org/gguf", "model.gguf", after_bytes=HALF)

    with pytest.raises(ChecksumMismatch) as e:
        await _fetcher(tmp_path, hub).ensure(
            "gemma",
            f"hf:org/gguf@{commit}:model.gguf",
            sha256=GGUF_SHA,
            **_mirrored(m1, m2),
        )

    (rest,) = m2.downloads("org/gguf", "model.gguf")
    assert rest.headers["range"] == f"bytes={HALF}-"
    # It asked for the rest and got the whole of the other file, which is then refused.
    assert hashlib.sha256(other).hexdigest() in e.value.message
    assert not (tmp_path / "weights" / "gemma" / "model.gguf").exists()


async def test_both_mirrors_dying_mid_file_is_a_clear_error_naming_each(tmp_path, mirrors, hub):
    m1, m2 = mirrors
    commit = _add(mirrors, "org/gguf", {"model.gguf": GGUF})
    m1.cut("org/gguf", "model.gguf", after_bytes=HALF)
    m2.cut("org/gguf", "model.gguf", after_bytes=100)

    with pytest.raises(DownloadFailed) as e:
        await _fetcher(tmp_path, hub).ensure(
            "gemma", f"hf:org/gguf@{commit}:model.gguf", **_mirrored(m1, m2)
        )

    assert "could not be fetched from any mirror" in e.value.message
    assert m1.url[7:] in e.value.message and m2.url[7:] in e.value.message
    assert "llmgw ctl mirror list" in e.value.hint
    assert hub.requests == []
    # What arrived is kept: starting the shard again resumes there, on the first mirror.
    got = await _fetcher(tmp_path, hub).ensure(
        "gemma", f"hf:org/gguf@{commit}:model.gguf", **_mirrored(m1, m2)
    )
    assert got.path.read_bytes() == GGUF
    assert m1.downloads("org/gguf", "model.gguf")[-1].headers["range"] == f"bytes={HALF + 100}-"


async def test_mirrors_that_cannot_be_reached_are_a_clear_error(tmp_path, hub):
    gone = [FakeHub(), FakeHub()]
    for g in gone:  # two ports nothing listens on any more
        await g.start()
        await g.close()

    with pytest.raises(DownloadFailed, match="could not be fetched from any mirror") as e:
        await _fetcher(tmp_path, hub).ensure(
            "gemma", "hf:org/gguf@" + "a" * 40 + ":model.gguf", **_mirrored(*gone)
        )

    assert all(g.url[7:] in e.value.message for g in gone)
    assert hub.requests == []


async def test_the_mirror_token_goes_to_the_mirrors_only_never_to_the_hub_or_a_log(
    tmp_path, mirrors, hub, caplog
):
    # Guards the cluster's read token handed to the internet's hub.
    m1, m2 = mirrors
    commit = _add([m1, hub], "org/gguf", {"model.gguf": GGUF})
    m1.cut("org/gguf", "model.gguf", after_bytes=HALF)
    caplog.set_level(logging.DEBUG)

    got = await _fetcher(tmp_path, hub).ensure(
        "gemma",
        f"hf:org/gguf@{commit}:model.gguf",
        **_mirrored(m1, m2, allow_internet=True),
    )

    assert got.path.read_bytes() == GGUF
    assert m1.requests and m2.requests
    for r in [*m1.requests, *m2.requests]:
        assert r.headers["authorization"] == f"Bearer {TOKEN}"
    # Mirror 2 does not hold it: the hub, allowed here, finishes the file from the byte reached.
    (rest,) = hub.downloads("org/gguf", "model.gguf")
    assert rest.headers["range"] == f"bytes={HALF}-"
    assert all("authorization" not in r.headers for r in hub.requests)
    assert TOKEN not in caplog.text


async def test_a_model_kept_off_the_internet_never_asks_the_hub(tmp_path, mirrors, hub):
    m1, m2 = mirrors
    commit = _add([hub], "org/gguf", {"model.gguf": GGUF})

    with pytest.raises(MirrorsLack) as e:
        await _fetcher(tmp_path, hub).ensure(
            "gemma", f"hf:org/gguf@{commit}:model.gguf", **_mirrored(m1, m2)
        )

    assert e.value.message.startswith(f"no mirror holds hf:org/gguf@{commit}:model.gguf")
    assert f"llmgw ctl mirror add hf:org/gguf@{commit}" in e.value.hint
    assert "allow_internet" in e.value.hint
    assert hub.requests == []
    # A whole repository the same.
    with pytest.raises(MirrorsLack):
        await _fetcher(tmp_path, hub).ensure("tiny", "hf:org/tiny", **_mirrored(m1, m2))
    assert hub.requests == []


async def test_a_mirror_refusing_the_token_is_said_naming_the_token(tmp_path, mirrors, hub):
    m1, m2 = mirrors
    commit = _add(mirrors, "org/gguf", {"model.gguf": GGUF})
    for m in mirrors:
        m.require_token("another-token")

    with pytest.raises(DownloadFailed) as e:
        await _fetcher(tmp_path, hub).ensure(
            "gemma", f"hf:org/gguf@{commit}:model.gguf", **_mirrored(m1, m2)
        )

    assert "refused the node's mirror token" in e.value.message and "403" in e.value.message
    assert "mirror-read-token" in e.value.hint and "read_token_file" in e.value.hint
    assert TOKEN not in e.value.message + e.value.hint
    # One mirror refusing is passed over while another gives the file.
    m2.require_token(TOKEN)
    got = await _fetcher(tmp_path, hub).ensure(
        "gemma", f"hf:org/gguf@{commit}:model.gguf", **_mirrored(m1, m2)
    )
    assert got.path.read_bytes() == GGUF


async def test_a_repository_is_fetched_across_two_mirrors_when_one_dies_mid_shard(
    tmp_path, mirrors, hub
):
    m1, m2 = mirrors
    commit = _add(mirrors, "org/tiny", REPO.files)
    m1.cut("org/tiny", SHARD, after_bytes=100_000)
    seen: list[tuple[int, int]] = []

    got = await _fetcher(tmp_path, hub).ensure(
        "tiny",
        f"hf:org/tiny@{commit}",
        on_progress=lambda d, t: seen.append((d, t)),
        **_mirrored(m1, m2),
    )

    on_disk = {
        str(p.relative_to(got.path)): p.read_bytes()
        for p in got.path.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }
    assert on_disk == REPO.files
    (rest,) = m2.downloads("org/tiny", SHARD)
    assert rest.headers["range"] == "bytes=100000-"
    # Progress over the whole repository never goes back across the failover.
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1] == (got.size_bytes, got.size_bytes)
    # The mirror that failed is asked last for the files after the cut.
    after = sorted(REPO.files)[sorted(REPO.files).index(SHARD) + 1 :]
    assert all(not m1.downloads("org/tiny", f) for f in after if f != SHARD)
    assert hub.requests == []


async def test_a_repository_the_first_mirror_lacks_is_listed_and_fetched_from_the_second(
    tmp_path, mirrors, hub
):
    m1, m2 = mirrors
    commit = m2.add_repo("org/tiny", REPO.files)

    got = await _fetcher(tmp_path, hub).ensure("tiny", "hf:org/tiny@main", **_mirrored(m1, m2))

    assert got.path.name == commit
    assert (got.path / SHARD).read_bytes() == REPO.files[SHARD]
    assert hub.requests == []


class _NoEngine:
    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def ensure(self, engine, version, say=None):
        self.asked.set()
        raise LlmgwError(f"{engine} stops here: the test only fetches")


async def test_a_shard_says_which_mirror_it_is_fetching_from(tmp_path, mirrors, hub):
    m1, m2 = mirrors
    commit = _add(mirrors, "org/tiny", REPO.files)
    m1.cut("org/tiny", SHARD, after_bytes=100_000)
    engines = _NoEngine()
    runner = ShardRunner(tmp_path, engines, fetcher=_fetcher(tmp_path, hub))
    sent = []
    runner.attach(lambda m: sent.append(m.shard_status.to_dict()) if m.shard_status else None)

    runner.start(
        StartShard(
            shard_id="s1",
            replica_id="r1",
            model="tiny",
            engine="vllm",
            gpu_indexes=[0],
            weights=WeightsSource(
                source=f"hf:org/tiny@{commit}", mirror_urls=[m1.url, m2.url], mirror_token=TOKEN
            ),
        )
    )
    await engines.asked.wait()

    words = [s.get("reason", "") for s in sent if s.get("state") == "fetching"]
    assert any(f"from mirror {m1.url[7:]}" in w for w in words), words
    assert any(f"from mirror {m2.url[7:]}" in w for w in words), words
    assert TOKEN not in repr(sent)


async def test_one_mirror_that_lacks_a_file_says_how_to_add_it(tmp_path, mirrors, hub):
    m1, _ = mirrors

    with pytest.raises(MirrorsLack) as e:
        await _fetcher(tmp_path, hub).ensure(
            "gemma", "hf:org/gguf@main:model.gguf", mirror_urls=[m1.url], mirror_token=TOKEN
        )

    assert f"mirror {m1.url[7:]}" in e.value.message and "404" in e.value.message
    assert "llmgw ctl mirror add hf:org/gguf@main" in e.value.hint


@pytest.fixture
def cluster_tls(tmp_path):
    """The cluster's CA on the node, and a server context for a mirror with its certificate."""
    ca = pki.create_ca("test")
    leaf = pki.issue_server_cert(ca, ["127.0.0.1"])
    node = pki.issue_node_cert(ca, "node-1")
    files = {
        "ca.crt": ca.cert_pem,
        "m.crt": leaf.cert_pem,
        "m.key": leaf.key_pem,
        "node.crt": node.cert_pem,
        "node.key": node.key_pem,
    }
    for name, pem in files.items():
        (tmp_path / name).write_bytes(pem)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "m.crt", tmp_path / "m.key")
    server.load_verify_locations(tmp_path / "ca.crt")
    server.verify_mode = ssl.CERT_REQUIRED  # a mirror whose tls.client_ca reads node certificates
    node_tls = mirror_tls(tmp_path / "ca.crt", tmp_path / "node.crt", tmp_path / "node.key")
    return server, node_tls


async def test_an_https_mirror_with_the_clusters_certificate_is_trusted_and_gets_the_nodes(
    tmp_path, cluster_tls, hub
):
    # Guards a node that trusted only the public CAs and so could reach no mirror set up with tls:.
    server, node_tls = cluster_tls
    async with FakeHub(tls=server) as m:
        m.require_token(TOKEN)
        commit = _add([m], "org/tiny", REPO.files)
        _add([m], "org/gguf", {"model.gguf": GGUF})

        fetcher = _fetcher(tmp_path, hub, verify=node_tls)
        one = await fetcher.ensure(
            "gemma", "hf:org/gguf:model.gguf", mirror_urls=[m.url], mirror_token=TOKEN
        )
        whole = await fetcher.ensure(
            "tiny", f"hf:org/tiny@{commit}", mirror_urls=[m.url], mirror_token=TOKEN
        )

    assert m.url.startswith("https://")
    assert one.path.read_bytes() == GGUF
    assert (whole.path / SHARD).read_bytes() == REPO.files[SHARD]


async def test_an_https_mirror_the_node_cannot_verify_is_said_plainly(tmp_path, cluster_tls, hub):
    server, _ = cluster_tls
    server.verify_mode = ssl.CERT_NONE
    async with FakeHub(tls=server) as m:
        _add([m], "org/gguf", {"model.gguf": GGUF})
        with pytest.raises(DownloadFailed) as e:
            await _fetcher(tmp_path, hub).ensure(
                "gemma", "hf:org/gguf:model.gguf", mirror_urls=[m.url], mirror_token=TOKEN
            )

    assert (
        f"mirror {m.url[8:]}" in e.value.message and "CERTIFICATE_VERIFY_FAILED" in e.value.message
    )


async def test_an_hf_file_with_no_pinned_sha256_is_checked_against_its_etag(tmp_path, mirrors, hub):
    # Guards bytes damaged on the way, or joined wrongly across mirrors, kept
    # because the model pinned no sha256: the ETag is the file's sha256.
    m1, m2 = mirrors
    commit = _add(mirrors, "org/gguf", {"model.gguf": GGUF})
    m2.corrupt("org/gguf", "model.gguf", offset=HALF + 10)
    m1.cut("org/gguf", "model.gguf", after_bytes=HALF)

    with pytest.raises(ChecksumMismatch, match="its ETag names"):
        await _fetcher(tmp_path, hub).ensure(
            "gemma", f"hf:org/gguf@{commit}:model.gguf", **_mirrored(m1, m2)
        )

    got = await _fetcher(tmp_path, hub).ensure(
        "gemma", f"hf:org/gguf@{commit}:model.gguf", **_mirrored(m1, m2)
    )
    assert got.path.read_bytes() == GGUF and got.sha256 == GGUF_SHA


async def test_a_repository_comes_whole_from_the_second_mirror_when_the_first_is_down(
    tmp_path, mirrors, hub
):
    _, m2 = mirrors
    commit = m2.add_repo("org/tiny", REPO.files)
    gone = FakeHub()
    await gone.start()
    await gone.close()  # a port nothing listens on any more

    got = await _fetcher(tmp_path, hub).ensure(
        "tiny", "hf:org/tiny", mirror_urls=[gone.url, m2.url], mirror_token=TOKEN
    )

    assert got.path.name == commit
    assert (got.path / SHARD).read_bytes() == REPO.files[SHARD]
    assert hub.requests == []
