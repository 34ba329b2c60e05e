"""`llmgw ctl model plan/serve` with Hugging Face repositories and local files, as an operator types it.

A real gatewayd whose server.yaml points hub_url at a fake hub on loopback
holding a tiny safetensors repository the test makes.
"""

from __future__ import annotations

import json

import pytest

from llmgw.errors import ExitCode
from tests.e2e.helpers import init_on_free_ports, llmgw, start, wait_until
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

REPO = make_tiny_repo()


@pytest.fixture
def hub():
    with FakeHub.in_thread() as h:
        yield h


@pytest.fixture
def server(tmp_path, hub):
    home = tmp_path / "home"
    init_on_free_ports(home)
    with (home / "etc" / "server.yaml").open("a") as f:
        f.write(f"\nhub_url: {hub.url}\n")
    proc = start(home, "server")
    try:
        wait_until(lambda: llmgw(home, "ctl", "status", "--json").returncode == 0, timeout_s=30)
        yield home
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_a_repository_is_planned_with_its_real_sizes_and_at_a_precision(server, hub):
    hub.add_repo("org/tiny", REPO.files)
    res = llmgw(server, "ctl", "model", "plan", "hf:org/tiny", "--engine", "vllm", "--json")
    assert res.returncode == 0, res.stderr
    facts = json.loads(res.stdout)["facts"]
    assert int(facts["parameters"]) == REPO.parameters
    assert int(facts["weights_bytes"]) == REPO.weights_bytes
    assert facts["format"] == "safetensors" and facts["layers"] == 4 and facts["kv_heads"] == 2
    assert facts["trained_context"] == 4096
    # Never the weights: only ranged reads of each shard's first bytes.
    shard_gets = [r for r in hub.requests if r.path.endswith(".safetensors")]
    assert shard_gets and all(r.headers.get("range", "").startswith("bytes=0-") for r in shard_gets)

    fp8 = llmgw(
        server,
        "ctl",
        "model",
        "plan",
        "hf:org/tiny",
        "--engine",
        "vllm",
        "--precision",
        "fp8",
        "--json",
    )
    assert fp8.returncode == 0, fp8.stderr
    assert int(json.loads(fp8.stdout)["facts"]["weights_bytes"]) == REPO.weights_bytes // 2

    shown = llmgw(server, "ctl", "model", "plan", "hf:org/tiny", "--engine", "vllm")
    assert shown.returncode == 0 and "llama · 4 layers · BF16" in shown.stdout

    refused = llmgw(
        server, "ctl", "model", "plan", "hf:org/tiny", "--engine", "llama.cpp", "--precision", "fp8"
    )
    assert refused.returncode != 0 and "precision fp8 is refused for llama.cpp" in refused.stderr


def test_a_served_repository_keeps_the_commit_it_was_pinned_to(server, hub):
    first = hub.add_repo("org/tiny", REPO.files)
    res = llmgw(
        server,
        "ctl",
        "model",
        "serve",
        "hf:org/tiny",
        "--engine",
        "vllm",
        "--replicas",
        "0",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    spec = json.loads(res.stdout)["spec"]
    assert spec["name"] == "tiny" and spec["source"] == "hf:org/tiny" and spec["commit"] == first
    hub.commit("org/tiny", {"README.md": b"moved upstream"})
    shown = json.loads(llmgw(server, "ctl", "model", "show", "tiny", "--json").stdout)
    assert shown["spec"]["commit"] == first


def test_a_repository_or_revision_that_does_not_exist_is_refused_at_add(server, hub):
    hub.add_repo("org/tiny", REPO.files)
    nope = llmgw(server, "ctl", "model", "serve", "hf:org/nope", "--engine", "vllm")
    assert nope.returncode == ExitCode.USAGE
    assert "org/nope is not a repository" in nope.stderr
    rev = llmgw(server, "ctl", "model", "serve", "hf:org/tiny@v7", "--engine", "vllm")
    assert rev.returncode == ExitCode.USAGE and "has no revision 'v7'" in rev.stderr


def test_a_local_file_that_is_not_weights_is_refused_saying_what_it_is_not(server):
    res = llmgw(server, "ctl", "model", "serve", "/etc/passwd", "--name", "x")
    assert res.returncode == ExitCode.USAGE
    assert "/etc/passwd is neither a GGUF file (no GGUF magic) nor a safetensors file" in res.stderr
    models = json.loads(llmgw(server, "ctl", "models", "--json").stdout)["models"]
    assert models == []
