"""One ``llmgw up`` serving the starter model through the real ``llama-server``, shared.

Starting it takes the starter's load and a replica's health wait; the client-API
acceptance tests (SDKs, conformance, Responses) all ask the same running gateway,
so it starts once per test session, on first use, and stops at the end.
Tests must leave it as they found it (no scaling, no restarts); one that needs
to change the cluster starts its own.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.helpers import init_on_free_ports, llmgw, start, wait_until


@dataclass(frozen=True)
class StarterGateway:
    home: Path
    # The starter's catalog name: what clients put in ``model``.
    model: str
    # http://127.0.0.1:PORT/v1
    base_url: str
    # A key of the default project, made by ``llmgw ctl keys create``.
    key: str

    def ctl_json(self, *args: str) -> dict:
        res = llmgw(self.home, "ctl", *args, "--json")
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)


def _ready_replica(home: Path) -> dict | None:
    res = llmgw(home, "ctl", "replicas", "--json", timeout_s=20)
    if res.returncode != 0:
        return None
    for r in json.loads(res.stdout)["replicas"]:
        if r["state"] == "ready" and r["endpoint"]:
            return r
    return None


@pytest.fixture(scope="session")
def starter_gateway(tmp_path_factory) -> StarterGateway:
    home = tmp_path_factory.mktemp("starter-up") / "home"
    init_on_free_ports(home)
    proc = start(home, "up")
    try:
        replica = wait_until(lambda: _ready_replica(home), timeout_s=240)
        status = json.loads(llmgw(home, "ctl", "status", "--json").stdout)
        created = llmgw(
            home, "ctl", "keys", "create", "--project", "local/default/default", "--json"
        )
        assert created.returncode == 0, created.stderr
        yield StarterGateway(
            home, replica["model"], status["gateway_url"], json.loads(created.stdout)["secret"]
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
