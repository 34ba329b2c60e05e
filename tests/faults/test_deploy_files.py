"""deploy/'s files are what the servers accept and what llmgw writes: each checked by the
server's own checker, its figures by the reference's, its units by llmgw's own code."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from tests.faults.harness import etcd_server
from tests.faults.harness.deploy_files import DEPLOY, llmgw_units, load_yaml, write_yaml
from tests.faults.harness.etcd import ETCD
from tests.faults.harness.haproxy import HAPROXY
from tests.faults.harness.patroni import PATRONI
from tests.faults.harness.procs import free_port, require_binaries

KEEPALIVED = "/usr/sbin/keepalived"


def _without_header(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def test_the_systemd_units_shown_are_the_ones_llmgw_writes():
    # Guards a copy in deploy/ that drifted from what server init and node add write.
    units = llmgw_units()
    shown = sorted(p.name for p in (DEPLOY / "systemd").glob("*.service"))
    assert shown == sorted(units)
    for name, text in units.items():
        assert _without_header((DEPLOY / "systemd" / name).read_text()) == text, name


def test_patroni_runs_with_the_references_timings_and_a_synchronous_standby():
    dcs = load_yaml("patroni/patroni.yml")["bootstrap"]["dcs"]
    assert (dcs["ttl"], dcs["loop_wait"], dcs["retry_timeout"]) == (20, 5, 5)
    # Patroni's own rule: a member must not lose its key while still retrying.
    assert dcs["loop_wait"] + 2 * dcs["retry_timeout"] <= dcs["ttl"]
    # An acknowledged commit (a usage row) is never lost with the primary.
    assert dcs["synchronous_mode"] is True and dcs["synchronous_mode_strict"] is False


async def test_patroni_accepts_the_deploy_file(tmp_path: Path):
    # Its own checker, on the file as shipped but for where it listens (this machine
    # has no 10.0.0.11) and the etcd it asks (one running here).
    require_binaries(PATRONI, ETCD)
    async with etcd_server(tmp_path / "etcd") as etcd:
        doc = load_yaml("patroni/patroni.yml")
        doc["restapi"]["listen"] = f"127.0.0.1:{free_port()}"
        doc["postgresql"]["listen"] = f"127.0.0.1:{free_port()}"
        doc["etcd3"]["hosts"] = etcd.hosts
        config = write_yaml(tmp_path / "patroni.yml", doc)
        proc = await asyncio.create_subprocess_exec(
            PATRONI, "--validate-config", str(config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        said, _ = await proc.communicate()
    assert proc.returncode == 0, said.decode()


def test_haproxy_accepts_the_deploy_file_and_checks_fast_enough():
    require_binaries(HAPROXY)
    path = DEPLOY / "haproxy" / "haproxy.cfg"
    done = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    text = path.read_text()
    # A dead control plane out within ~2 s (checks every 1 s, out after 2), and a
    # request refused at connect tried again elsewhere, nothing else retried.
    assert "default-server inter 1s fastinter 500ms downinter 1s fall 2 rise 2" in text
    assert "retry-on conn-failure" in text and "option redispatch 1" in text
    assert "http-check send meth GET uri /ready" in text
    assert "http-check send meth GET uri /leader" in text
    # Every server line names the client in a PROXY v2 header, its checks too (a LOCAL
    # one): without it each control plane counts every client as HAProxy.
    servers = [line.strip() for line in text.splitlines() if line.strip().startswith("server ")]
    assert servers and all(
        line.endswith("check send-proxy-v2 check-send-proxy") for line in servers
    )


def test_etcd_serves_the_v3_gateway_patroni_speaks():
    # Guards the config file's silent default: unset keys are false, and without the
    # gateway Patroni's etcd3 client gets 404 from /v3 and waits forever.
    doc = load_yaml("etcd/etcd.conf.yml")
    assert doc["enable-grpc-gateway"] is True
    assert doc["name"] in doc["initial-cluster"]


def test_keepalived_accepts_its_example():
    # Optional (no test here moves a floating address): checked when keepalived is installed.
    if not Path(KEEPALIVED).exists():
        pytest.skip("keepalived is not installed (apt-get install -y keepalived)")
    path = DEPLOY / "keepalived" / "keepalived.conf"
    done = subprocess.run(
        [KEEPALIVED, "--config-test", "--log-console", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    # keepalived 2.2 ends a clean config test by signalling itself; a config it
    # refuses says why and exits with a status.
    assert done.returncode <= 0 and not (done.stdout + done.stderr).strip(), done.stderr
    conf = path.read_text()
    assert "http://127.0.0.1:8080/leader" in conf
    assert "virtual_router_id 50" in conf and "10.0.0.50/24" in conf


def test_every_deploy_file_the_guide_names_exists():
    # Guards a guide that tells operators to copy a file that was renamed or never made.
    guide = (DEPLOY.parent / "docs" / "ha.md").read_text()
    named = {n.rstrip(".,:)") for n in re.findall(r"deploy/[\w./-]+", guide)}
    assert {
        "deploy/haproxy/haproxy.cfg",
        "deploy/patroni/patroni.yml",
        "deploy/etcd/etcd.conf.yml",
        "deploy/keepalived/keepalived.conf",
    } <= named
    assert [n for n in sorted(named) if not (DEPLOY.parent / n).exists()] == []
