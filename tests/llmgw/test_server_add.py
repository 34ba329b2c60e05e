"""``server add`` against an in-process asyncssh machine: what it carries, how, and each refusal.

The machine is node add's fake (tests/llmgw/onboard/fake_node.py): the SSH
login, SFTP, the probe, the file commands and the step logic are real. Two
parts of the world are played on top of it: the network (the store's
address in the DSN is a port on 127.0.0.1 here, listening or closed as the
test wants) and the control plane that gets started (an HTTP port answering
/health 200 and /leader 503, as a standby's does). That gatewayd really
starts from the carried files is tests/e2e/test_server_add_netns.py's part.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import stat
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from llmgw.cli.init_cmds import server_init
from llmgw.onboard.wheel import self_wheel
from llmgw.paths import Paths
from llmgw.setup import plan as setup_plan
from llmgw.setup.cluster_init import init_server
from llmgw.setup.server_add import ServerAddPlan, add_server, decide
from llmgw.setup.server_add_files import ServerLayout
from llmgw.tls import pki
from tests.llmgw.onboard.fake_node import FakeNode, Scenario, start_fake_node
from tests.ports import free_port as _free_port

DB = "10.20.30.40:5432"
DSN = f"postgresql://llmgw:s3cret-pw@{DB}/llmgw"
SERVER_START = re.compile(
    r"setsid (?P<llmgw>\S+) server --config (?P<config>\S+) </dev/null >>(?P<log>\S+) 2>&1 "
    r"& echo \$! > (?P<pidfile>\S+);"
)


class ControlPlaneMachine(FakeNode):
    """The fake machine, with the store's network and a started control plane played."""

    store_at: str = ""  # the local HOST:PORT the DSN's address stands for
    http: asyncio.AbstractServer | None = None
    starts: int = 0
    stops: int = 0

    async def play(self, argv: list[str]) -> tuple[str, str, int]:
        words = list(argv)
        env = {}
        if words and words[0] == "env":
            words = words[1:]
            while words and "=" in words[0]:
                key, _, value = words.pop(0).partition("=")
                env[key] = value
        if words[:2] == ["sh", "-c"]:
            return await self._sh(words[2], env)
        if len(words) > 1 and words[1].endswith("probe.py"):
            return await self._probe_through_the_network(argv)
        return await super().play(argv)

    async def _probe_through_the_network(self, argv: list[str]) -> tuple[str, str, int]:
        mapped = [self.store_at if a == DB else a for a in argv]
        out, err, code = await super().play(mapped)
        if code == 0:
            facts = json.loads(out)
            for r in facts["reach"]:
                r["address"] = DB
            out = json.dumps(facts) + "\n"
        return out, err, code

    async def _sh(self, script: str, env: dict[str, str]) -> tuple[str, str, int]:
        running = self.http is not None
        if script.startswith("kill -0"):
            return "", "", 0 if running else 1
        if 'kill "$pid"' in script:
            await self.stop_control_plane()
            self.stops += 1
            return "", "", 0
        start = SERVER_START.search(script)
        if start is None:
            return "", f"fake machine: no part for sh -c {shlex.quote(script)}\n", 127
        cfg = yaml.safe_load(Path(start["config"]).read_text())
        port = int(cfg["listen"]["http"].rsplit(":", 1)[1])
        tls = None
        http = cfg.get("http") or {}
        if http.get("tls_cert"):  # HTTPS only, with the certificate server.yaml names
            import ssl

            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(http["tls_cert"], http["tls_key"])
        self.http = await asyncio.start_server(_standby_http, "127.0.0.1", port, ssl=tls)
        self.starts += 1
        Path(start["pidfile"]).parent.mkdir(parents=True, exist_ok=True)
        Path(start["pidfile"]).write_text("4242\n")
        return "", "", 0

    async def stop_control_plane(self) -> None:
        if self.http is not None:
            self.http.close()
            await self.http.wait_closed()
            self.http = None


async def _standby_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """gatewayd's HTTP port as a standby answers it: /health 200, /leader 503."""
    request = await reader.readline()
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    path = request.split()[1].decode() if len(request.split()) > 1 else "/"
    code, body = {"/health": (200, b'{"status": "ok"}')}.get(path, (503, b'{"leader": false}'))
    writer.write(
        f"HTTP/1.1 {code} X\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    writer.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def wheel_cache(tmp_path_factory) -> Path:
    """The self wheel built once for the module (each control plane would build its own)."""
    cache = tmp_path_factory.mktemp("self-wheels")
    self_wheel(cache)
    return cache


def _cluster(tmp_path: Path, wheel_cache: Path, *, dsn: str = DSN) -> Paths:
    paths = Paths.under(tmp_path / "cp")
    ports = {name: _free_port() for name in ("agent", "admin", "http", "metrics")}
    init_server(paths, hosts=["cp-a.example"], store_dsn=dsn, ports=ports)
    paths.server_data_dir.mkdir(parents=True, exist_ok=True)
    (paths.server_data_dir / "self-wheels").symlink_to(wheel_cache)
    return paths


@contextlib.asynccontextmanager
async def machine(tmp_path: Path, *, store_up: bool = True):
    node = await start_fake_node(tmp_path, Scenario())
    # node add's fake, made before its commands arrive: given the parts played here.
    node.__class__ = ControlPlaneMachine
    db = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    if store_up:
        node.store_at = f"127.0.0.1:{db.sockets[0].getsockname()[1]}"
    else:
        node.store_at = f"127.0.0.1:{_free_port()}"
    try:
        yield node
    finally:
        db.close()
        await node.stop_control_plane()
        node.server.close()
        await asyncio.wait_for(node.server.wait_closed(), 10)


def _plan(paths: Paths, node: FakeNode, tmp_path: Path, **kw) -> ServerAddPlan:
    from llmgw.onboard import SshTarget

    return ServerAddPlan(
        target=SshTarget(
            host="127.0.0.1",
            port=node.port,
            user="root",
            identity=str(node.client_key_file),
            known_hosts=str(node.known_hosts_file),
        ),
        paths=paths,
        install_root=str(tmp_path / "root"),
        ready_timeout_s=20,
        **kw,
    )


async def _run(plan: ServerAddPlan) -> list:
    return [ev async for ev in add_server(plan)]


def _steps(events) -> dict[str, object]:
    """The last event of each step, by step name."""
    return {ev.step: ev for ev in events if ev.step != "result"}


async def test_a_cluster_on_sqlite_is_refused_before_logging_in_naming_the_store_it_needs(
    tmp_path, wheel_cache
):
    paths = _cluster(tmp_path, wheel_cache, dsn="")
    async with machine(tmp_path) as node:
        events = await _run(_plan(paths, node, tmp_path))
    result = events[-1]
    assert result.step == "result" and result.result["exit_code"] == 2
    assert "SQLite" in result.detail and "PostgreSQL store" in result.detail
    assert "store.dsn" in result.fix and "postgresql://" in result.fix
    # Nothing ran there: not even a login.
    assert node.commands == []


async def test_a_store_this_machine_reaches_on_loopback_is_refused_unless_given_its_address(
    tmp_path, wheel_cache
):
    paths = _cluster(tmp_path, wheel_cache, dsn="postgresql://llmgw@127.0.0.1:5432/llmgw")
    async with machine(tmp_path) as node:
        events = await _run(_plan(paths, node, tmp_path))
        assert events[-1].result["exit_code"] == 2
        assert "loopback" in events[-1].detail and "--store-dsn" in events[-1].fix
        assert node.commands == []
        # Given the address the new machine reaches it by, it goes on.
        plan = _plan(paths, node, tmp_path, store_dsn=DSN)
        assert decide(plan).store_address == DB


def test_the_server_certificate_names_the_host_and_the_advertised_address(tmp_path, wheel_cache):
    from llmgw.onboard import SshTarget

    paths = _cluster(tmp_path, wheel_cache)
    plan = ServerAddPlan(target=SshTarget(host="10.1.2.3"), paths=paths, advertise="CP-B.example")
    assert decide(plan).cert_hosts == ["10.1.2.3", "cp-b.example"]
    bad = ServerAddPlan(target=SshTarget(host="gpu_box"), paths=paths)
    with pytest.raises(Exception, match="neither a DNS name") as e:
        decide(bad)
    assert "--advertise" in e.value.hint


async def test_a_machine_that_cannot_reach_the_store_stops_at_the_doctor(tmp_path, wheel_cache):
    paths = _cluster(tmp_path, wheel_cache)
    async with machine(tmp_path, store_up=False) as node:
        events = await _run(_plan(paths, node, tmp_path))
    store = next(ev for ev in events if ev.item == "store")
    assert store.status == "fail"
    assert store.detail.startswith(f"the machine cannot reach the store (PostgreSQL) at {DB} (")
    assert "TCP port 5432 on 10.20.30.40" in store.fix and "pg_hba.conf" in store.fix
    assert events[-1].result["exit_code"] == 1
    # Nothing was installed on a machine that failed its checks.
    assert not any("pip" in c or "install -D" in c for c in node.commands)


async def test_the_new_control_plane_gets_the_cluster_files_0600_and_never_on_a_command_line(
    tmp_path, wheel_cache
):
    paths = _cluster(tmp_path, wheel_cache)
    async with machine(tmp_path) as node:
        events = await _run(_plan(paths, node, tmp_path))
        again = await _run(_plan(paths, node, tmp_path))
        starts_after_again = node.starts
        # A secret changed here (a new admin token) is carried again, and the
        # control plane restarted to read it.
        paths.admin_token_file.write_text("a-new-admin-token\n")
        changed = await _run(_plan(paths, node, tmp_path))

    result = events[-1]
    assert result.status == "ok", [e.model_dump() for e in events if e.status == "fail"]
    assert result.result["role"] == "standby" and result.result["exit_code"] == 0
    assert result.fix == "Check it: llmgw ctl status"
    steps = _steps(events)
    assert list(steps) == ["connect", "doctor", "install", "files", "service", "ready"]
    # This control plane is not running here: said, and the new one's /health was asked.
    assert any(ev.step == "ready" and ev.status == "warn" for ev in events)
    assert "answers http://127.0.0.1:" in steps["ready"].detail

    there = ServerLayout.for_root(str(tmp_path / "root")).paths
    # The same CA (key and all), admin token and the secrets gatewayd makes on first use,
    # made here first so both hold the same ones.
    for mine, theirs in (
        (paths.ca_key, there.ca_key),
        (paths.ca_cert, there.ca_cert),
        (paths.secrets_dir / "engine-key", there.secrets_dir / "engine-key"),
        (paths.secrets_dir / "mcp-seal.key", there.secrets_dir / "mcp-seal.key"),
    ):
        assert theirs.read_bytes() == mine.read_bytes(), theirs
    assert result.result["made_here"] == ["engine-key", "mcp-seal.key"]
    for secret in ("admin-token", "engine-key", "mcp-seal.key", "store-dsn"):
        assert _mode(there.secrets_dir / secret) == 0o600, secret
    assert _mode(there.ca_key) == _mode(there.server_key) == 0o600
    assert _mode(there.secrets_dir) == _mode(there.pki_dir) == 0o700
    assert (there.secrets_dir / "store-dsn").read_text().strip() == DSN

    # Its own certificate, from the cluster's CA, for the name it is reached by.
    cert = there.server_cert.read_bytes()
    assert pki.issued_by(cert, paths.ca_cert.read_bytes())
    assert "127.0.0.1" in pki.cert_hosts(cert)
    assert cert != paths.server_cert.read_bytes()

    cfg = yaml.safe_load(there.server_yaml.read_text())
    # The DSN (it holds a password) in its 0600 file, never inline.
    assert cfg["store"]["dsn_file"] == str(there.secrets_dir / "store-dsn")
    assert not cfg["store"]["dsn"] and "s3cret-pw" not in there.server_yaml.read_text()
    assert cfg["cluster"]["advertise_host"] == "127.0.0.1"
    assert cfg["cluster_name"] == "llmgw"
    assert cfg["setup"]["node"] is False and cfg["setup"]["project"] == ""
    mine = yaml.safe_load(paths.server_yaml.read_text())
    assert cfg["listen"]["http"] == "0.0.0.0:" + mine["listen"]["http"].rsplit(":", 1)[1]
    cp_id = (there.server_data_dir / "control-plane-id").read_text().strip()
    assert result.result["control_plane_id"] == cp_id

    # Every secret travelled over SFTP: none is on any command line sent.
    token = paths.admin_token_file.read_text().strip()
    ca_key_line = paths.ca_key.read_text().splitlines()[1]
    for command in node.commands:
        for secret in ("s3cret-pw", token, ca_key_line):
            assert secret not in command, command
    # How it was reached is kept, for a later run.
    record = json.loads((paths.config_dir / "control-planes" / f"{cp_id}.json").read_text())
    assert record["port"] == node.port and record["install_root"] == str(tmp_path / "root")

    # Again: everything in place is kept, the id and certificate too, nothing restarted.
    steps = _steps(again)
    assert again[-1].status == "ok"
    assert steps["install"].status == steps["files"].status == steps["service"].status == "kept"
    assert (there.server_data_dir / "control-plane-id").read_text().strip() == cp_id
    assert there.server_cert.read_bytes() == cert
    assert starts_after_again == 1

    steps = _steps(changed)
    assert changed[-1].status == "ok"
    assert steps["files"].detail.startswith("wrote admin-token (")
    assert (there.secrets_dir / "admin-token").read_text() == "a-new-admin-token\n"
    assert node.stops == 1 and node.starts == 2


async def test_server_add_is_said_to_run_again_in_the_words_of_its_failures(tmp_path, wheel_cache):
    # Guards the shared SSH pieces: their words named node add to a server add user.
    paths = _cluster(tmp_path, wheel_cache)
    async with machine(tmp_path) as node:
        plan = _plan(paths, node, tmp_path)
        node.known_hosts_file.write_text("")
        events = await _run(plan)
    assert events[-1].result["exit_code"] == 6
    assert "unknown" in events[-1].detail and "--accept-new-host-key" in events[-1].fix


def _app(fn) -> typer.Typer:
    app = typer.Typer()
    app.command()(fn)
    return app


def test_server_init_with_standbys_on_sqlite_is_refused_naming_store_dsn_and_writes_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("LLMGW_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMGW_STORE_DSN", raising=False)
    res = CliRunner().invoke(
        _app(server_init), ["--standbys", "cp-b.example", "--no-node", "--no-starter"]
    )
    assert res.exit_code == 2, res.output
    assert "--store-dsn" in res.stderr and "PostgreSQL" in res.stderr
    assert not (tmp_path / "home" / "etc" / "server.yaml").exists()


def test_the_setup_plan_shows_its_standbys_in_the_same_install_as_a_command():
    plan = setup_plan.SetupPlan(
        control_plane=setup_plan.ControlPlanePart(standbys=("cp-b.example", "10.0.0.3")),
        store=setup_plan.StorePart(kind="postgres", dsn="postgresql://llmgw@db:5432/llmgw"),
        starter=setup_plan.StarterPart(on=False),
    )
    argv = setup_plan.to_command(plan)
    assert argv[argv.index("--standbys") + 1] == "cp-b.example"
    assert argv.count("--standbys") == 2
    assert setup_plan.check(plan, setup_plan.Machine()) == []
    on_sqlite = plan.with_part("store", setup_plan.StorePart())
    refusals = setup_plan.check(on_sqlite, setup_plan.Machine())
    assert [r.part for r in refusals] == ["control_plane"]
    assert "PostgreSQL" in refusals[0].message


async def test_a_standby_of_a_new_cluster_is_waited_for_on_its_own_health_without_a_warning(
    tmp_path, wheel_cache
):
    # server init --standbys runs before this control plane is started: its silent admin
    # API is expected then, not a warning.
    import dataclasses

    from llmgw.cli.server_add_cmds import drive, standby_plans

    paths = _cluster(tmp_path, wheel_cache)
    async with machine(tmp_path) as node:
        (plan,) = standby_plans(paths, ["127.0.0.1"], user="root", identity="")
        assert plan.expect_running is False
        plan = dataclasses.replace(
            plan,
            target=dataclasses.replace(
                plan.target,
                port=node.port,
                identity=str(node.client_key_file),
                known_hosts=str(node.known_hosts_file),
            ),
            install_root=str(tmp_path / "root"),
            ready_timeout_s=20,
        )
        (result,) = await drive([plan], json_output=True)
    assert result["ok"] is True and result["role"] == "standby", result
    # Only that no systemd runs the fake machine; nothing about the cluster.
    assert {w["check"] for w in result["warnings"]} == {"systemd"}
    ready = [s for s in result["steps"] if s["step"] == "ready"]
    assert [s["status"] for s in ready] == ["running", "ok"]


async def test_a_cluster_whose_gateway_serves_https_gives_the_new_control_plane_its_own_cert(
    tmp_path, wheel_cache
):
    # Guards server add carrying server.yaml's http.tls_cert as this machine's path, with no
    # certificate there: the new control plane refused to start.
    from llmgw.setup.http_init import ensure_http_cert, http_cert_paths

    paths = _cluster(tmp_path, wheel_cache)
    ensure_http_cert(paths, ["cp-a.example"])
    crt, key = http_cert_paths(paths)
    cfg = yaml.safe_load(paths.server_yaml.read_text())
    cfg["http"] = {"tls_cert": str(crt), "tls_key": str(key)}
    paths.server_yaml.write_text(yaml.safe_dump(cfg))
    async with machine(tmp_path) as node:
        events = await _run(_plan(paths, node, tmp_path))
        again = await _run(_plan(paths, node, tmp_path))
    assert events[-1].status == "ok", [e.model_dump() for e in events if e.status == "fail"]
    # Its /health was asked over https, checked against the cluster CA.
    assert "answers https://127.0.0.1:" in _steps(events)["ready"].detail
    there = ServerLayout.for_root(str(tmp_path / "root")).paths
    their_crt, their_key = http_cert_paths(there)
    theirs = yaml.safe_load(there.server_yaml.read_text())
    assert theirs["http"]["tls_cert"] == str(their_crt)
    assert theirs["http"]["tls_key"] == str(their_key)
    issued = their_crt.read_bytes()
    assert pki.issued_by(issued, paths.ca_cert.read_bytes())
    assert "127.0.0.1" in pki.cert_hosts(issued) and issued != crt.read_bytes()
    assert _mode(their_key) == 0o600
    # Again: the certificate there is sound, and kept.
    assert again[-1].status == "ok" and _steps(again)["files"].status == "kept"
    assert their_crt.read_bytes() == issued
