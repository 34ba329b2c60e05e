"""`llmgw ctl warnings`, `replica restart` and `node rm` as an operator types them (no nodes)."""

from __future__ import annotations

import json

from llmgw.errors import ExitCode
from tests.e2e.helpers import llmgw, wait_until
from tests.e2e.test_cli import server  # noqa: F401  (the running gatewayd fixture)


def test_an_unplaceable_replica_is_a_warning_and_is_tried_again_on_restart(server):  # noqa: F811
    res = llmgw(server, "ctl", "model", "serve", "/m/x.gguf", "--engine", "sim", "--name", "x")
    assert res.returncode == 0, res.stderr

    def warned():
        reply = json.loads(llmgw(server, "ctl", "warnings", "--json").stdout)
        return [w for w in reply["warnings"] if w["kind"] == "replica"]

    wait_until(warned, timeout_s=30)
    (w,) = warned()
    assert w["severity"] == "warning" and w["current"] is True
    assert w["message"].startswith("x: cannot be placed:")
    assert w["hint"] == "every node's reason: llmgw ctl explain-placement x"
    assert set(w) == {"at", "severity", "kind", "subject", "message", "hint", "current"}

    people = llmgw(server, "ctl", "warnings")
    assert people.returncode == 0 and "Warnings since" in people.stdout

    restarted = llmgw(server, "ctl", "replica", "restart", w["subject"], "--json")
    assert restarted.returncode == 0, restarted.stderr
    reply = json.loads(restarted.stdout)
    assert reply["action"] == "retry" and reply["replica"]["replica_id"] == w["subject"]
    said = llmgw(server, "ctl", "replica", "restart", w["subject"])
    assert said.returncode == 0 and "is tried again now" in said.stdout


def test_what_does_not_exist_is_refused_with_the_command_to_look(server):  # noqa: F811
    rm = llmgw(server, "ctl", "node", "rm", "nope")
    assert rm.returncode == ExitCode.NOT_FOUND
    assert "no node named 'nope'; see: llmgw ctl nodes" in rm.stderr

    restart = llmgw(server, "ctl", "replica", "restart", "nope")
    assert restart.returncode == ExitCode.NOT_FOUND and "llmgw ctl replicas" in restart.stderr

    since = llmgw(server, "ctl", "warnings", "--since", "soon")
    assert since.returncode == ExitCode.USAGE and "is not a duration" in since.stderr

    status = json.loads(llmgw(server, "ctl", "status", "--json").stdout)
    assert status["requests_total"] == 0 and status["errors_total"] == 0
