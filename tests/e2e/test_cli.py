"""The CLI's refusals and JSON output, run as subprocesses."""

from __future__ import annotations

import json

import pytest

from llmgw.errors import ExitCode
from tests.e2e.helpers import init_on_free_ports, llmgw, start, wait_until


@pytest.fixture
def server(tmp_path):
    home = tmp_path / "home"
    init_on_free_ports(home)
    proc = start(home, "server")
    try:
        wait_until(lambda: llmgw(home, "ctl", "status", "--json").returncode == 0, timeout_s=30)
        yield home
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_ctl_status_json_is_exactly_the_admin_reply(server):
    res = llmgw(server, "ctl", "status", "--json")
    reply = json.loads(res.stdout)
    assert reply["leader"] is True and reply["store_backend"] == "sqlite"
    assert reply["nodes_total"] == 0
    assert res.stderr == ""


def test_ctl_nodes_on_an_empty_cluster_says_how_to_add_one(server):
    res = llmgw(server, "ctl", "nodes")
    assert res.returncode == 0
    assert "llmgw node add" in res.stdout


def test_a_wrong_admin_token_is_refused_with_a_clear_message(server):
    (server / "etc/secrets/admin-token").write_text("wrong\n")
    res = llmgw(server, "ctl", "nodes", "--json")
    assert res.returncode == ExitCode.UNAUTHENTICATED
    assert "the admin token was refused" in res.stderr
    assert res.stdout == ""


def test_an_unknown_node_exits_not_found(server):
    res = llmgw(server, "ctl", "node", "show", "ghost", "--json")
    assert res.returncode == ExitCode.NOT_FOUND
    assert "no node named 'ghost'" in res.stderr and res.stdout == ""


def test_ctl_without_a_running_server_says_it_does_not_answer(tmp_path):
    home = tmp_path / "home"
    init_on_free_ports(home)
    res = llmgw(home, "ctl", "nodes")
    assert res.returncode == ExitCode.UNREACHABLE
    assert "does not answer" in res.stderr


def test_an_unknown_key_in_server_yaml_is_refused_naming_file_and_key(tmp_path):
    home = tmp_path / "home"
    init_on_free_ports(home)
    with open(home / "etc/server.yaml", "a") as f:
        f.write("lisen: oops\n")
    res = llmgw(home, "server", timeout_s=30)
    assert res.returncode == ExitCode.CONFIG
    assert "server.yaml" in res.stderr and "unknown key 'lisen'" in res.stderr


def test_an_ill_typed_key_in_server_yaml_says_what_is_expected(tmp_path):
    home = tmp_path / "home"
    init_on_free_ports(home)
    text = (
        (home / "etc/server.yaml")
        .read_text()
        .replace("not_ready_grace_s: 15.0", "not_ready_grace_s: soon")
    )
    (home / "etc/server.yaml").write_text(text)
    res = llmgw(home, "server", timeout_s=30)
    assert res.returncode == ExitCode.CONFIG
    assert "nodes.not_ready_grace_s" in res.stderr and "number" in res.stderr


def test_version_json(tmp_path):
    res = llmgw(tmp_path, "version", "--json")
    assert json.loads(res.stdout)["version"]
