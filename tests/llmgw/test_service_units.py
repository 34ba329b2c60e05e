"""The control plane's unit (llmgw-server.service), its step in ``server init``, and how
``llmgw stop|start`` decides between systemd and pid files.

systemd cannot run here: a shell script plays ``systemctl`` and writes down each call,
so what was (and was not) asked of it is what the test reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
from typer.testing import CliRunner

from llmgw import pidfile
from llmgw.cli.main import app
from llmgw.config import ServerConfig, StoreConfig
from llmgw.onboard.layout import UNIT_NAME as AGENT_UNIT_NAME
from llmgw.paths import Paths
from llmgw.setup.server_unit import (
    SERVER_UNIT_NAME,
    agent_unit_text,
    ensure_agent_unit,
    ensure_server_unit,
    server_unit_text,
    store_is_local,
)
from llmgw.setup.services import Services
from llmgw.setup.systemd import Systemd

# Plays systemctl: every call is appended to $FAKE_SD/calls; units named in
# $FAKE_SD/loaded are loaded from $FAKE_SD/units, those in $FAKE_SD/active run.
FAKE_SYSTEMCTL = textwrap.dedent(
    """\
    #!/bin/sh
    d="$FAKE_SD"
    echo "$*" >> "$d/calls"
    unit=""; for a in "$@"; do unit="$a"; done
    case "$1" in
      show)
        grep -qx "$unit" "$d/loaded" 2>/dev/null || { [ "$3" = LoadState ] && echo not-found; exit 0; }
        case "$3" in
          LoadState) echo loaded ;;
          FragmentPath) echo "$(cat "$d/units")/$unit" ;;
          MainPID) echo 4242 ;;
        esac ;;
      is-active) grep -qx "$unit" "$d/active" 2>/dev/null ;;
      stop) grep -vx "$unit" "$d/active" > "$d/active.new"; mv "$d/active.new" "$d/active" ;;
      enable) [ ! -e "$d/refuse-enable" ] || { echo "Failed to enable unit: access denied"; exit 1; } ;;
    esac
    """
)


def fake_systemd(tmp_path: Path, monkeypatch, *, booted: bool = True) -> tuple[Systemd, Path]:
    d = tmp_path / "fake-sd"
    d.mkdir()
    prog = d / "systemctl"
    prog.write_text(FAKE_SYSTEMCTL)
    prog.chmod(0o755)
    (d / "units").write_text(str(tmp_path / "home" / "etc" / "systemd"))
    monkeypatch.setenv("FAKE_SD", str(d))
    return Systemd(booted=booted, program=str(prog)), d


def calls(d: Path) -> list[str]:
    f = d / "calls"
    return f.read_text().splitlines() if f.exists() else []


def system_like(tmp_path: Path) -> Paths:
    """The system layout (no LLMGW_HOME), but in a temporary folder."""
    root = tmp_path / "root"
    return Paths(
        config_dir=root / "etc" / "llmgw",
        server_data_dir=root / "var" / "lib" / "llmgw",
        agent_data_dir=root / "var" / "lib" / "llmgw-agent",
        engines_dir=root / "opt" / "engines",
        run_dir=root / "run" / "llmgw",
    )


def test_the_unit_runs_llmgw_server_always_after_the_network(tmp_path) -> None:
    paths = Paths.under(tmp_path)
    text = server_unit_text(paths, ServerConfig())
    assert f"server --config {paths.server_yaml}\n" in text
    assert "ExecStart=" in text and "llmgw" in text.split("ExecStart=")[1].split()[0]
    assert "Restart=always\n" in text and "WantedBy=multi-user.target" in text
    assert "After=network-online.target\n" in text
    assert f"Environment=LLMGW_HOME={paths.home}\n" in text
    assert "Environment=" not in server_unit_text(system_like(tmp_path), ServerConfig())


def test_a_store_on_this_machine_puts_the_unit_after_postgresql(tmp_path) -> None:
    def local(dsn: str) -> bool:
        return store_is_local(ServerConfig(store=StoreConfig(dsn=dsn)))

    assert local("postgresql://llmgw:pw@localhost/llmgw")
    assert local("postgresql://llmgw@127.0.0.1:5432/llmgw")
    assert local("postgresql:///llmgw?host=/run/postgresql")
    assert not local("postgresql://llmgw@db.example/llmgw")
    assert not local("")  # the embedded SQLite
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text("postgresql://llmgw:secret@[::1]/llmgw\n")
    cfg = ServerConfig(store=StoreConfig(dsn_file=str(dsn_file)))
    assert "After=network-online.target postgresql.service\n" in server_unit_text(
        Paths.under(tmp_path), cfg
    )


def test_under_llmgw_home_the_unit_is_written_kept_and_rewritten_without_calling_systemctl(
    tmp_path, monkeypatch
) -> None:
    # The failure it guards: a test (or a user's own cluster) under LLMGW_HOME enabling
    # a unit in the machine's systemd.
    sd, d = fake_systemd(tmp_path, monkeypatch)
    paths = Paths.under(tmp_path / "home")
    first = ensure_server_unit(paths, ServerConfig(), sd)
    assert first.action == "created" and not first.enabled
    assert first.path == str(paths.config_dir / "systemd" / SERVER_UNIT_NAME)
    assert first.to_run == f"systemctl link {first.path} && systemctl enable {SERVER_UNIT_NAME}"
    assert ensure_server_unit(paths, ServerConfig(), sd).action == "kept"
    Path(first.path).write_text("[Service]\nExecStart=/old/llmgw server\n")
    assert ensure_server_unit(paths, ServerConfig(), sd).action == "rewritten"
    assert "Restart=always" in Path(first.path).read_text()
    assert calls(d) == []


def test_on_a_system_install_with_systemd_the_unit_is_enabled_and_reloaded_only_when_new(
    tmp_path, monkeypatch
) -> None:
    sd, d = fake_systemd(tmp_path, monkeypatch)
    paths, unit_dir = system_like(tmp_path), tmp_path / "root" / "etc" / "systemd" / "system"
    step = ensure_server_unit(paths, ServerConfig(), sd, unit_dir=unit_dir)
    assert step.action == "created" and step.enabled and step.to_run == ""
    assert (unit_dir / SERVER_UNIT_NAME).read_text() == server_unit_text(paths, ServerConfig())
    assert calls(d) == ["daemon-reload", f"enable {SERVER_UNIT_NAME}"]
    again = ensure_server_unit(paths, ServerConfig(), sd, unit_dir=unit_dir)
    assert again.action == "kept" and again.enabled
    assert calls(d)[2:] == [f"enable {SERVER_UNIT_NAME}"]


def test_a_refused_enable_or_no_systemd_says_what_to_run(tmp_path, monkeypatch) -> None:
    sd, d = fake_systemd(tmp_path, monkeypatch)
    (d / "refuse-enable").touch()
    paths, unit_dir = system_like(tmp_path), tmp_path / "units"
    step = ensure_server_unit(paths, ServerConfig(), sd, unit_dir=unit_dir)
    assert not step.enabled and "access denied" in step.reason
    assert step.to_run == f"systemctl enable {SERVER_UNIT_NAME}"
    unbooted = Systemd(booted=False, program=sd.program)
    step = ensure_server_unit(paths, ServerConfig(), unbooted, unit_dir=tmp_path / "other")
    assert not step.enabled and step.reason == "no systemd running here"
    assert step.to_run == f"systemctl daemon-reload && systemctl enable {SERVER_UNIT_NAME}"
    assert len(calls(d)) == 2  # only the refused run's reload and enable


def test_server_init_shows_the_units_step_and_puts_it_in_its_json(tmp_path) -> None:
    env = {"LLMGW_HOME": str(tmp_path)}
    res = CliRunner().invoke(app, ["server", "init", "--no-starter"], env=env)
    assert res.exit_code == 0, res.output
    unit = Paths.under(tmp_path).config_dir / "systemd" / SERVER_UNIT_NAME
    assert f"created   control plane unit  {unit}" in res.stdout
    assert f"systemctl link {unit}" in res.stdout
    assert res.stdout.rstrip().endswith("Start it: llmgw server")
    again = CliRunner().invoke(app, ["server", "init", "--no-starter", "--json"], env=env)
    step = json.loads(again.stdout)["server_unit"]
    assert step["action"] == "kept" and step["path"] == str(unit) and step["enabled"] is False


def test_stop_asks_systemd_for_units_of_this_home_agent_first(tmp_path, monkeypatch) -> None:
    sd, d = fake_systemd(tmp_path, monkeypatch)
    paths = Paths.under(tmp_path / "home")
    for f in (paths.server_yaml, paths.agent_yaml, paths.mirror_yaml):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}\n")
    units = ["llmgw-agent.service", SERVER_UNIT_NAME, "llmgw-mirror.service"]
    (d / "loaded").write_text("\n".join(units) + "\n")
    (d / "active").write_text("\n".join(units[:2]) + "\n")
    got = Services(paths, sd).stop()
    assert [(p.part, p.action, p.via) for p in got] == [
        ("agent", "stopped", "systemd"),
        ("control plane", "stopped", "systemd"),
        ("mirror", "not running", "systemd"),
    ]
    assert "engines keep running" in got[0].detail and got[0].pid == 4242
    assert [c for c in calls(d) if c.startswith("stop")] == [f"stop {u}" for u in units[:2]]


def test_a_machine_unit_of_the_same_name_is_left_alone_under_llmgw_home(
    tmp_path, monkeypatch
) -> None:
    # The failure it guards: `llmgw stop` in a test stopping the machine's real control plane.
    sd, d = fake_systemd(tmp_path, monkeypatch)
    (d / "units").write_text("/etc/systemd/system")
    (d / "loaded").write_text(f"{SERVER_UNIT_NAME}\n")
    (d / "active").write_text(f"{SERVER_UNIT_NAME}\n")
    paths = Paths.under(tmp_path / "home")
    paths.server_yaml.parent.mkdir(parents=True)
    paths.server_yaml.write_text("{}\n")
    got = {p.part: p for p in Services(paths, sd).stop()}
    assert got["control plane"].action == "not running" and got["control plane"].via == ""
    assert not [c for c in calls(d) if c.startswith("stop")]


def test_a_pid_file_is_trusted_only_for_a_live_llmgw_process_of_its_kind(tmp_path) -> None:
    # The failure it guards: a pid left by a crash, reused by another program, being killed.
    f = tmp_path / "run" / "llmgw-server.pid"
    with pidfile.held(f):
        assert pidfile.read_pid(f) == os.getpid()
    assert not f.exists()
    stranger = subprocess.Popen(["sleep", "30"])
    # Popen returns once the exec has begun; the new program's arguments are readable
    # only once it runs (CI read an empty command line once): it says when it runs.
    llmgw_like = subprocess.Popen(
        [sys.executable, "-c", "import time; print(flush=True); time.sleep(30)", "llmgw", "server"],
        stdout=subprocess.PIPE,
    )
    assert llmgw_like.stdout is not None
    llmgw_like.stdout.readline()
    try:
        f.write_text(f"{stranger.pid}\n")
        assert pidfile.live_pid(f, "server") is None
        f.write_text(f"{llmgw_like.pid}\n")
        assert pidfile.live_pid(f, "server") == llmgw_like.pid
        assert pidfile.live_pid(f, "agent") is None
    finally:
        for p in (stranger, llmgw_like):
            p.kill()
            p.wait()
    assert pidfile.live_pid(f, "server") is None


def test_stop_leaves_a_control_plane_under_llmgw_up_alone_and_says_whose_it_is(tmp_path) -> None:
    # The failure it guards: `llmgw stop` stopping gatewayd only for `llmgw up` to restart it.
    paths = Paths.under(tmp_path / "home")
    paths.server_yaml.parent.mkdir(parents=True)
    paths.server_yaml.write_text("{}\n")
    paths.run_dir.mkdir(parents=True)
    child = "import time; time.sleep(30)"
    # Plays `llmgw up`: a parent whose command says so, its child playing `llmgw server`;
    # it says the child's pid once the pid file is written.
    script = textwrap.dedent(
        f"""\
        import subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", {child!r}, "llmgw", "server"])
        open({str(paths.server_pid_file)!r}, "w").write(str(p.pid))
        print(p.pid, flush=True)
        p.wait()
        """
    )
    up = subprocess.Popen(
        [sys.executable, "-c", script, "llmgw", "up"], stdout=subprocess.PIPE, text=True
    )
    try:
        server = int(up.stdout.readline())
        got = {p.part: p for p in Services(paths, Systemd(booted=False)).stop()}
        cp = got["control plane"]
        assert cp.action == "failed" and cp.pid == server
        assert f"llmgw up (pid {up.pid})" in cp.detail
        assert pidfile.live_pid(paths.server_pid_file, "server") == server
    finally:
        for proc in psutil.Process(up.pid).children():
            proc.kill()
        up.kill()
        up.wait()
        up.stdout.close()


def test_the_agent_unit_of_a_control_planes_own_node_comes_after_it_and_spares_its_engines(
    tmp_path,
) -> None:
    paths = Paths.under(tmp_path)
    text = agent_unit_text(paths)
    assert f"agent --config {paths.agent_yaml}\n" in text
    assert f"After=network-online.target {SERVER_UNIT_NAME}\n" in text
    assert "Restart=always\n" in text and "KillMode=process\n" in text
    assert f"Environment=LLMGW_HOME={paths.home}\n" in text
    assert "Environment=" not in agent_unit_text(system_like(tmp_path))


def test_an_agent_unit_on_a_system_install_is_enabled_beside_the_control_planes(
    tmp_path, monkeypatch
) -> None:
    sd, d = fake_systemd(tmp_path, monkeypatch)
    paths, unit_dir = system_like(tmp_path), tmp_path / "root" / "etc" / "systemd" / "system"
    step = ensure_agent_unit(paths, sd, unit_dir=unit_dir)
    assert step.item == "agent_unit" and step.action == "created" and step.enabled
    assert (unit_dir / AGENT_UNIT_NAME).read_text() == agent_unit_text(paths)
    assert calls(d) == ["daemon-reload", f"enable {AGENT_UNIT_NAME}"]


def test_server_init_with_its_node_writes_the_agents_unit_too(tmp_path) -> None:
    env = {"LLMGW_HOME": str(tmp_path)}
    res = CliRunner().invoke(app, ["server", "init", "--no-starter", "--node"], env=env)
    assert res.exit_code == 0, res.output
    unit = Paths.under(tmp_path).config_dir / "systemd" / AGENT_UNIT_NAME
    assert f"created   agent unit          {unit}" in res.stdout
    assert f"systemctl link {unit} && systemctl enable {AGENT_UNIT_NAME}" in res.stdout
    assert res.stdout.rstrip().endswith("Start it: llmgw up")
    again = CliRunner().invoke(app, ["server", "init", "--no-starter", "--node", "--json"], env=env)
    out = json.loads(again.stdout)
    assert out["agent_unit"]["action"] == "kept" and out["agent_unit"]["path"] == str(unit)
    # Without a node of its own, no agent unit.
    other = {"LLMGW_HOME": str(tmp_path / "other")}
    res = CliRunner().invoke(app, ["server", "init", "--no-starter", "--json"], env=other)
    assert json.loads(res.stdout)["agent_unit"] is None
