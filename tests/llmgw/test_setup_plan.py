"""A setup plan, its ``llmgw server init`` command, and what it refuses before installing."""

from __future__ import annotations

import grp
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app
from llmgw.config import DEFAULT_PROJECT, SetupConfig, load_agent_config, load_server_config
from llmgw.errors import UsageError
from llmgw.modelplan.gguf_meta import read_gguf
from llmgw.paths import Paths
from llmgw.setup import plan as setup_plan
from llmgw.setup import run as setup_run
from llmgw.setup import words as setup_words
from llmgw.setup.plan import (
    AdminPart,
    ControlPlanePart,
    LimitsPart,
    Machine,
    NodePart,
    SetupPlan,
    StarterPart,
    StorePart,
    check,
    command_env,
    shell_text,
    steps,
    to_command,
)
from tests.ports import free_port

GIB = 1 << 30
BIG = Machine(
    hostname="cp-1",
    memory_total_bytes=24 * GIB,
    memory_available_bytes=20 * GIB,
    starter_installed=True,
)
SMALL = BIG.model_copy(update={"memory_total_bytes": GIB, "memory_available_bytes": GIB // 2})


def own_group() -> str:
    return grp.getgrgid(os.getgid()).gr_name


def full_plan() -> SetupPlan:
    """Every part in, every setting away from its default."""
    return SetupPlan(
        control_plane=ControlPlanePart(
            cluster_name="lab",
            hosts=("cp.example", "10.1.2.3"),
            agent_port=free_port(),
            admin_port=free_port(),
            http_port=free_port(),
            metrics_port=free_port(),
        ),
        node=NodePart(node_id="gpu-1"),
        # Off: the round trip is about the files, not about this machine's memory.
        starter=StarterPart(on=False),
        limits=LimitsPart(
            project="acme/ml/chat", rpm=60, tpm=10000, budget_month_micros=25_500_000
        ),
        admin=AdminPart(on=True, group=own_group()),
    )


def run_command(argv: list[str], home: Path, env: dict[str, str] | None = None):
    """``argv`` (as to_command gives it) through the real ``llmgw`` Typer app."""
    assert argv[:3] == ["llmgw", "server", "init"]
    return CliRunner().invoke(app, argv[1:], env={"LLMGW_HOME": str(home), **(env or {})})


def test_the_command_of_a_plan_makes_the_files_the_plan_says(tmp_path) -> None:
    plan = full_plan()
    res = run_command(to_command(plan), tmp_path)
    assert res.exit_code == 0, res.output
    paths = Paths.under(tmp_path)

    cfg = load_server_config(paths.server_yaml)
    cp = plan.control_plane
    assert cfg.cluster_name == "lab"
    assert cfg.listen.agent == f"0.0.0.0:{cp.agent_port}"
    assert cfg.listen.admin == f"127.0.0.1:{cp.admin_port}"
    assert cfg.listen.http == f"0.0.0.0:{cp.http_port}"
    assert cfg.listen.metrics == f"0.0.0.0:{cp.metrics_port}"
    assert cfg.store.dsn == "" and cfg.store.dsn_file == ""
    assert cfg.setup == setup_plan.setup_config(plan)
    assert cfg.setup.project == "acme/ml/chat" and cfg.setup.budget_month_micros == 25_500_000

    agent = load_agent_config(paths.agent_yaml)
    assert agent.node_id == "gpu-1"
    assert agent.control_planes == [f"127.0.0.1:{cp.agent_port}"]
    assert Path(agent.pki.cert).exists() and Path(agent.pki.key).exists()

    token = paths.admin_token_file.stat()
    assert stat.S_IMODE(token.st_mode) == 0o640 and token.st_gid == os.getgid()
    assert stat.S_IMODE(paths.secrets_dir.stat().st_mode) == 0o750
    assert res.stdout.rstrip().endswith("Start it: llmgw up")


def test_a_plan_with_every_part_left_out_is_a_command_too(tmp_path) -> None:
    plan = SetupPlan(
        node=NodePart(on=False),
        starter=StarterPart(on=False),
        limits=LimitsPart(on=False),
        admin=AdminPart(on=False),
        control_plane=ControlPlanePart(agent_port=free_port()),
    )
    argv = to_command(plan)
    assert {"--no-node", "--no-starter", "--no-project"} <= set(argv)
    res = run_command(argv, tmp_path)
    assert res.exit_code == 0, res.output
    paths = Paths.under(tmp_path)
    assert load_server_config(paths.server_yaml).setup == SetupConfig(
        node=False, starter=False, project=""
    )
    assert not paths.agent_yaml.exists()
    assert stat.S_IMODE(paths.admin_token_file.stat().st_mode) == 0o600


def test_running_the_command_again_keeps_the_group_s_access_to_the_token(tmp_path) -> None:
    # Regression guard: init closes a secret others can read; the token given to
    # a group was closed on every rerun (and a warning said it was a mistake).
    argv = to_command(full_plan())
    assert run_command(argv, tmp_path).exit_code == 0
    again = run_command(argv, tmp_path)
    assert again.exit_code == 0, again.output
    assert "readable by others" not in again.output
    token = Paths.under(tmp_path).admin_token_file
    assert stat.S_IMODE(token.stat().st_mode) == 0o640


def test_setup_flags_on_a_kept_server_yaml_are_said_not_applied(tmp_path) -> None:
    assert run_command(["llmgw", "server", "init"], tmp_path).exit_code == 0
    res = run_command(["llmgw", "server", "init", "--project", "acme/ml/chat"], tmp_path)
    assert res.exit_code == 0
    assert "setup flags" in res.stdout and "--force-config" in res.stdout
    cfg = load_server_config(Paths.under(tmp_path).server_yaml)
    assert cfg.setup.project == DEFAULT_PROJECT


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--node-id", "gpu-1"], "--node"),
        (["--project", "a/b/c", "--no-project"], "contradict"),
        (["--no-project", "--rpm", "5"], "--project"),
        (["--project", "just-an-org"], "ORG/TEAM/PROJECT"),
        (["--budget-month", "lots"], "amount of money"),
        (["--admin-group", "no-such-group-here"], "no group"),
    ],
)
def test_contradicting_or_bad_setup_flags_are_refused_before_anything_is_written(
    tmp_path, args, words
) -> None:
    res = run_command(["llmgw", "server", "init", *args], tmp_path)
    assert res.exit_code == UsageError.exit_code, res.output
    assert words in res.stderr
    assert not Paths.under(tmp_path).config_dir.exists()


def test_a_password_never_goes_on_the_command_line(tmp_path) -> None:
    dsn = "postgresql://llmgw:hunter2@db.example:5432/llmgw"
    plan = SetupPlan(store=StorePart(kind="postgres", dsn=dsn))
    assert "hunter2" not in " ".join(to_command(plan))
    assert command_env(plan) == {"LLMGW_STORE_DSN": dsn}
    shown = shell_text(plan, home=str(tmp_path))
    assert "hunter2" not in shown and "llmgw:****@db.example" in shown
    assert shown.startswith(f"LLMGW_HOME={tmp_path} LLMGW_STORE_DSN=")
    # Without a password it is a flag like any other.
    plain = SetupPlan(store=StorePart(kind="postgres", dsn="postgresql://llmgw@db/llmgw"))
    argv = to_command(plain)
    assert argv[argv.index("--store-dsn") + 1] == "postgresql://llmgw@db/llmgw"
    res = run_command(to_command(plan), tmp_path, env=command_env(plan))
    assert res.exit_code == 0, res.output
    cfg = load_server_config(Paths.under(tmp_path).server_yaml)
    assert Path(cfg.store.dsn_file).read_text() == dsn


def test_a_machine_too_small_for_the_starter_is_refused_naming_the_flags_that_leave_it_out():
    plan = setup_plan.default_plan(SMALL)
    [refusal] = check(plan, SMALL)
    assert refusal.part == "starter"
    assert "gemma-3-270m" in refusal.message and "1.0 GB" in refusal.message
    assert refusal.flags == ["--no-starter", "--no-node"]
    assert refusal.text().endswith("leave it out with --no-starter or --no-node")
    assert check(plan.toggled("starter"), SMALL) == []
    assert check(plan.toggled("node"), SMALL) == []
    assert check(plan, BIG) == []


def test_a_machine_whose_gateway_already_runs_is_not_refused_its_memory() -> None:
    # A rerun (say, to add a --host) where the starter already runs is not refused.
    running = SMALL.model_copy(update={"gateway_running": True})
    assert check(setup_plan.default_plan(running), running) == []


def test_a_starter_that_is_not_installed_is_refused_with_how_to_install_it() -> None:
    bare = BIG.model_copy(update={"starter_installed": False})
    assert setup_plan.default_plan(bare).starter.on is False
    [refusal] = check(setup_plan.default_plan(bare).toggled("starter"), bare)
    assert "llmgw[starter]" in refusal.message and refusal.flags == ["--no-starter"]


def test_server_init_refuses_a_machine_too_small_before_installing_anything(
    tmp_path, monkeypatch
) -> None:
    # This machine's memory as a 1 GB machine would report it.
    monkeypatch.setattr(setup_run, "_meminfo", lambda: (GIB, GIB // 2))
    monkeypatch.setattr(setup_run.starter, "available", lambda: True)
    res = run_command(["llmgw", "server", "init", "--node", "--starter"], tmp_path)
    assert res.exit_code == UsageError.exit_code, res.output
    assert "gemma-3-270m" in res.stderr
    assert "nothing was installed; leave it out with --no-starter or --no-node" in res.stderr
    assert not Paths.under(tmp_path).config_dir.exists()
    res = run_command(["llmgw", "server", "init", "--node", "--no-starter"], tmp_path)
    assert res.exit_code == 0, res.output


def test_a_port_in_use_is_refused_with_the_flag_that_moves_it(tmp_path) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        plan = SetupPlan(control_plane=ControlPlanePart(http_port=port))
        machine = setup_run.this_machine(Paths.under(tmp_path), ports=(port,))
        refusals = check(plan, machine)
    assert [r.part for r in refusals] == ["control_plane"]
    assert f"port {port} (http) is in use" in refusals[0].message
    assert "--http-port" in refusals[0].message


def test_two_parts_on_one_port_are_refused() -> None:
    plan = SetupPlan(control_plane=ControlPlanePart(agent_port=9000, http_port=9000))
    assert any("both 9000" in r.message for r in check(plan, BIG))


def test_a_plan_without_a_control_plane_says_how_a_node_is_added_instead() -> None:
    [refusal] = check(SetupPlan().toggled("control_plane"), BIG)
    assert "llmgw node cert" in refusal.message


def test_the_steps_of_a_run_follow_the_parts() -> None:
    plan = setup_plan.default_plan(BIG)
    assert [s.key for s in steps(plan, start=False)] == ["check", "init", "node"]
    assert [s.key for s in steps(plan)] == [
        "check",
        "init",
        "node",
        "start",
        "api",
        "node_ready",
        "project",
        "starter",
    ]
    lean = plan.toggled("node").toggled("limits")
    assert [s.key for s in steps(lean)] == ["check", "init", "start", "api"]


def test_what_next_names_the_home_in_every_command() -> None:
    lines = setup_words.what_next(setup_plan.default_plan(BIG), started=False, home="/tmp/h")
    assert lines[0] == "Start the cluster: LLMGW_HOME=/tmp/h llmgw up"
    assert all("LLMGW_HOME=/tmp/h llmgw" in line for line in lines)


def test_the_starter_facts_are_those_of_the_real_model(gemma3_270m_gguf) -> None:
    assert read_gguf(gemma3_270m_gguf) == setup_plan.STARTER_FACTS


@pytest.mark.postgres
async def test_the_store_check_connects_to_a_real_postgresql(postgres_dsn) -> None:
    answer = await setup_run.check_postgres(postgres_dsn)
    assert answer.ok, answer.message
    assert "PostgreSQL 1" in answer.message


@pytest.mark.postgres
async def test_the_store_check_says_why_a_database_refused(postgres_cluster) -> None:
    answer = await setup_run.check_postgres(postgres_cluster.dsn("no_such_db"))
    assert not answer.ok
    assert "no_such_db" in answer.message and "createdb" in answer.message
    refusals = check(
        SetupPlan(store=StorePart(kind="postgres", dsn=postgres_cluster.dsn("no_such_db"))),
        BIG,
        store=answer,
    )
    assert [r.part for r in refusals] == ["store"]


async def test_the_store_check_says_nothing_answers_at_a_bad_address() -> None:
    answer = await setup_run.check_postgres(f"postgresql://llmgw@127.0.0.1:{free_port()}/llmgw")
    assert not answer.ok
    assert "nothing answers" in answer.message and "127.0.0.1" in answer.message


def test_the_plan_and_its_run_import_without_a_ui_framework() -> None:
    code = (
        "import llmgw.setup.plan, llmgw.setup.run, llmgw.setup.words, sys; "
        "assert not {'textual', 'typer', 'tui'} & set(sys.modules), sorted(sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
