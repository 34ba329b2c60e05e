"""A GGUF file's facts read through a hub's resolve URL with Range reads, the header only."""

from __future__ import annotations

import pytest

from llmgw.hub import HubAnswerInvalid, HubClient, gguf_remote
from llmgw.hub.gguf_remote import read_remote_gguf
from llmgw.modelplan.gguf_meta import read_gguf
from tests.fakes.hub import FakeHub
from tests.llmgw.modelplan.test_gguf_meta import write_gguf


def _ranges(hub: FakeHub, path: str) -> list[str]:
    return [r.headers.get("range", "") for r in hub.requests if r.path.endswith(path)]


async def test_a_small_gguf_is_read_in_one_range_and_agrees_with_the_local_reader(tmp_path):
    local = write_gguf(tmp_path / "m.gguf")
    async with FakeHub() as hub, HubClient(hub.url) as client:
        commit = hub.add_repo("org/m", {"m.gguf": local.read_bytes()})
        facts = await read_remote_gguf(client, "org/m", commit, "m.gguf")
        assert [r for r in _ranges(hub, "m.gguf") if r] == [f"bytes=0-{local.stat().st_size - 1}"]
    assert facts == read_gguf(local)


async def test_a_header_longer_than_the_first_read_is_read_again_four_times_longer(
    tmp_path, monkeypatch
):
    # As gemma-3's 6 MB header is against the 4 MB first read.
    local = write_gguf(tmp_path / "m.gguf", tokens=3000)
    monkeypatch.setattr(gguf_remote, "FIRST_READ_BYTES", 1024)
    async with FakeHub() as hub, HubClient(hub.url) as client:
        commit = hub.add_repo("org/m", {"m.gguf": local.read_bytes()})
        facts = await read_remote_gguf(client, "org/m", commit, "m.gguf")
        ranges = [r for r in _ranges(hub, "m.gguf") if r]
    assert ranges[:3] == ["bytes=0-1023", "bytes=1024-4095", "bytes=4096-16383"]
    assert facts == read_gguf(local) and facts.vocab_size == 3000


async def test_a_file_that_is_not_gguf_is_refused_in_plain_words():
    async with FakeHub() as hub, HubClient(hub.url) as client:
        commit = hub.add_repo("org/m", {"m.gguf": b"<html>not a model</html>"})
        with pytest.raises(HubAnswerInvalid, match="org/m/m.gguf: not a GGUF file"):
            await read_remote_gguf(client, "org/m", commit, "m.gguf")


async def test_a_gguf_cut_short_says_it_may_be_incomplete(tmp_path):
    data = write_gguf(tmp_path / "m.gguf").read_bytes()
    async with FakeHub() as hub, HubClient(hub.url) as client:
        commit = hub.add_repo("org/m", {"m.gguf": data[:200]})
        with pytest.raises(HubAnswerInvalid, match="not a readable GGUF file") as cut:
            await read_remote_gguf(client, "org/m", commit, "m.gguf")
    assert "cut short" in cut.value.hint


async def test_a_split_model_counts_every_part_the_tree_lists(tmp_path):
    first = write_gguf(tmp_path / "m-00001-of-00002.gguf", extra={"split.count": 2})
    files = {"q4/m-00001-of-00002.gguf": first.read_bytes(), "q4/m-00002-of-00002.gguf": b"x" * 999}
    async with FakeHub() as hub, HubClient(hub.url) as client:
        commit = hub.add_repo("org/m", files)
        facts = await read_remote_gguf(client, "org/m", commit, "q4/m-00001-of-00002.gguf")
    assert facts.weights_bytes == first.stat().st_size + 999


async def test_the_real_gemma3_270m_is_planned_from_a_few_megabytes(gemma3_270m_gguf):
    data = gemma3_270m_gguf.read_bytes()
    async with FakeHub() as hub, HubClient(hub.url) as client:
        commit = hub.add_repo("google/gemma-3-270m-gguf", {"gemma-3-270m-Q4_K_M.gguf": data})
        facts = await read_remote_gguf(
            client, "google/gemma-3-270m-gguf", commit, "gemma-3-270m-Q4_K_M.gguf"
        )
        ranges = [r for r in _ranges(hub, ".gguf") if r]
    assert facts == read_gguf(gemma3_270m_gguf)
    assert facts.weights_bytes == len(data) and facts.vocab_size == 262144
    last_byte = int(ranges[-1].rsplit("-", 1)[1])
    assert last_byte < 16 << 20  # a header's worth, never the 253 MB of weights
