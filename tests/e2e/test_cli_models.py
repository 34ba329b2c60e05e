"""`llmgw ctl model …` as an operator types it, against a real gatewayd (no nodes needed)."""

from __future__ import annotations

import json

from llmgw.errors import ExitCode
from tests.e2e.helpers import llmgw
from tests.e2e.test_cli import server  # noqa: F401  (the running gatewayd fixture)


def test_a_model_is_served_listed_scaled_and_removed(server):  # noqa: F811
    res = llmgw(
        server,
        "ctl",
        "model",
        "serve",
        "/models/tiny.Q4_K_M.gguf",
        "--engine",
        "sim",
        "--replicas",
        "0",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)
    assert view["spec"]["name"] == "tiny.q4-k-m" and view["state"] == "stopped"

    again = llmgw(server, "ctl", "model", "serve", "/models/tiny.Q4_K_M.gguf", "--engine", "sim")
    assert again.returncode == ExitCode.CONFLICT and "exists" in again.stderr

    scaled = json.loads(llmgw(server, "ctl", "model", "scale", "tiny.q4-k-m", "2", "--json").stdout)
    assert scaled["replicas_desired"] == 2

    models = json.loads(llmgw(server, "ctl", "models", "--json").stdout)["models"]
    assert [m["spec"]["name"] for m in models] == ["tiny.q4-k-m"]

    gone = json.loads(llmgw(server, "ctl", "model", "rm", "tiny.q4-k-m", "--json").stdout)
    assert gone["name"] == "tiny.q4-k-m"
    assert json.loads(llmgw(server, "ctl", "models", "--json").stdout)["models"] == []


def test_a_model_is_added_from_a_yaml_file(server, tmp_path):  # noqa: F811
    spec = tmp_path / "model.yaml"
    spec.write_text(
        "name: chat\nsource: /models/chat.gguf\nreplicas_min: 0\nreplicas_max: 0\n"
        "profiles:\n  - engine: llama.cpp\n    cpu: true\n    args: [--threads, '4']\n"
    )
    res = llmgw(server, "ctl", "model", "add", str(spec), "--json")
    assert res.returncode == 0, res.stderr
    profile = json.loads(res.stdout)["spec"]["profiles"][0]
    assert (
        profile["engine"] == "llama.cpp"
        and profile["cpu"]
        and profile["args"] == ["--threads", "4"]
    )


def test_bad_models_are_refused_with_what_is_wrong(server, tmp_path):  # noqa: F811
    pickle = llmgw(server, "ctl", "model", "serve", "hf:org/repo:pytorch_model.bin")
    assert pickle.returncode == ExitCode.USAGE
    assert "pickle format" in pickle.stderr and "allow_pickle" in pickle.stderr

    dotted = llmgw(server, "ctl", "model", "serve", "/m/x.gguf", "--name", "../escape")
    assert dotted.returncode == ExitCode.USAGE and "one path element" in dotted.stderr

    flag = tmp_path / "bad.yaml"
    flag.write_text(
        "name: bad\nsource: /m/x.gguf\nprofiles:\n  - engine: vllm\n"
        "    args: [--trust_remote_code]\n"
    )
    refused = llmgw(server, "ctl", "model", "add", str(flag))
    assert refused.returncode == ExitCode.USAGE and "--trust_remote_code" in refused.stderr

    unknown = llmgw(server, "ctl", "model", "scale", "nope", "1")
    assert unknown.returncode == ExitCode.NOT_FOUND and "no model named 'nope'" in unknown.stderr
